"""Ignore rules for a workspace walk: which entries a snapshot leaves out.

Owns ckpt's gitignore semantics: per-directory `.gitignore` (only when `use_gitignore`) and
`.ckptignore` files, root-level `extra_patterns`, git's own exclude files (`info/exclude` and
`core.excludesFile`, found by gitexclude.py; only when `use_gitignore`), and the exclusions no
pattern can undo: `.git` at any depth, restore staging directories at the root
(`.ckpt-staging-<hex>`) and the `excluded` paths (the store, when it lies inside the root).
Other ckpt stores under the root are recognised by their marker files where the scan lists
them (storemarks.py), not here.

Pattern syntax is pathspec's gitignore dialect (`GitIgnoreSpecPattern` turns each line into a
regex). This module decides which patterns are consulted for an entry, in git's dir.c order: the
deepest ignore file with a matching pattern decides, the last matching pattern in a file wins, and
nothing under an ignored directory is looked at (the walker does not descend; `is_ignored_path`
checks the ancestors). In one directory `.gitignore`, `.ckptignore` and (root) `extra_patterns`
act as one file in that order; below every directory's files come `info/exclude`, then
`core.excludesFile` (git's order: the lowest precedence last), both relative to the root. Each regex counts only when it matches the entry itself:
`GitIgnoreSpec.check_file` also matches everything under a matched directory, which goes wrong
once a deeper file re-includes that directory.

It reads ignore files and nothing else: it must not walk, stat entries, print, or raise for an
unreadable ignore file (that file counts as empty and is listed in `IgnoreRules.unreadable`).

Known differences from git, inherited from pathspec's regexes on decoded text: `?` and `[...]`
match one code point where git matches one byte (only multi-byte UTF-8 names differ), trailing
whitespace other than spaces is stripped, POSIX classes (`[[:alpha:]]`) are not understood, and a
line with a range Python rejects (`[z-a]`) matches nothing.
"""

from __future__ import annotations

import importlib.machinery
import os
import re
import stat
import sys
import warnings
from collections.abc import Container, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Final, NamedTuple

from ckpt.checkpoints.snapshot.gitexclude import GitExcludes, read_git_excludes

GITIGNORE: Final = b".gitignore"
CKPTIGNORE: Final = b".ckptignore"

# os.fsdecode spelled out: the same conversion, without its type dispatch on the hot path.
_FS_ENCODING: Final = sys.getfilesystemencoding()
_FS_ERRORS: Final = sys.getfilesystemencodeerrors()
# Git does not follow a symlinked in-tree .gitignore; O_NONBLOCK keeps a FIFO from hanging us.
_OPEN_FLAGS: Final = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_ALWAYS_OUT: Final = frozenset({".git"})
# A restore's staging directory when the store is on another file system (restore/restorer.py
# `_staging_dir`): "<prefix><hex token>" at the root, never workspace content.
STAGING_PREFIX: Final = ".ckpt-staging-"
_HEX: Final = frozenset("0123456789abcdef")
_GLOB_CHARS: Final = frozenset("*?[\\")
# Shapes of pathspec's regex sources that this module relies on (pinned by the tests).
_ANY_DIRS: Final = "^(?:.+/)?"  # leading "**/": any number of directories
_DIR_MARK: Final = "(?P<ps_d>/)"  # the slash after a name that matched as a directory
_NAME_ENDS: Final = ("(?:(?P<ps_d>/)|$)", _DIR_MARK)

# Match kinds. Name kinds look only at the entry's name; path kinds at its path relative to the
# ignore file's directory. The literal kinds skip regex compilation, which dominates load time
# (Linux: 1,349 of its 1,436 patterns are literals or "*literal"), as git has fast paths.
_NAME_EQ, _NAME_SUFFIX, _NAME_RE, _ALL, _PATH_EQ, _PATH_RE, _PATH_INSIDE = range(7)


class _RootNames(frozenset[str]):
    """The names always out of the root: those of `_ALWAYS_OUT` and the excluded paths, and
    every restore staging directory (`STAGING_PREFIX` + hex). Only the root pays the test."""

    __slots__ = ()

    def __contains__(self, name: object) -> bool:
        if frozenset.__contains__(self, name):
            return True
        return (isinstance(name, str) and name.startswith(STAGING_PREFIX)
                and len(name) > len(STAGING_PREFIX)
                and _HEX.issuperset(name[len(STAGING_PREFIX):]))


@dataclass(frozen=True, slots=True)
class _Rule:
    """One pattern line."""

    kind: int
    ignore: bool  # False for a negated (`!`) pattern
    dir_only: bool  # the pattern ends with "/"
    text: str  # the literal compared by _NAME_EQ, _NAME_SUFFIX and _PATH_EQ
    regex: re.Pattern[str] | None
    segs: tuple[str, ...] = ()  # path kinds: the segments, to prune rules a directory can't reach
    globstar: int = -1  # index of the first "**" segment; 0 means "may match at any depth"


@dataclass(frozen=True, slots=True)
class _Level:
    """The compiled patterns of one directory's ignore files."""

    rules: tuple[_Rule, ...]  # in file order
    path_rules: tuple[_Rule, ...]  # the path kinds among them
    names: frozenset[str]  # prefilter: _NAME_EQ texts
    suffixes: tuple[str, ...]  # prefilter: _NAME_SUFFIX texts
    name_re: re.Pattern[str] | None  # prefilter: every _NAME_RE rule in one alternation
    always: bool  # an _ALL rule (or an uncombinable regex): the prefilter can't rule anything out


@dataclass(frozen=True, slots=True)
class _Frame:
    """A level as seen from a directory at or below the level's own directory."""

    level: _Level
    depth: int  # depth of the level's directory below the root
    base: int  # length of that directory's root-relative prefix ("a/b/") in DirRules._rel
    live: tuple[_Rule, ...]  # path rules that can still match an entry here or below


class _Prefilter(NamedTuple):
    """A cheap superset test: can any rule in force match an entry of this directory?
    A tuple so that the hot path can unpack it in one step."""

    always: bool
    names: frozenset[str]
    suffixes: tuple[str, ...]
    name_res: tuple[re.Pattern[str], ...]
    paths: tuple[tuple[int, _Rule], ...]  # (frame base, rule): regex path rules active here


def _plain(seg: str) -> bool:
    return bool(seg) and _GLOB_CHARS.isdisjoint(seg)


def _compile(source: str) -> re.Pattern[str]:
    # DOTALL: git's "**" and leading directories may contain a newline in a name.
    with warnings.catch_warnings():  # "[[" in a user's pattern: re's future-syntax warning
        warnings.simplefilter("ignore", FutureWarning)
        return re.compile(source, re.DOTALL)


# pathspec's translation of each pattern line seen: [regex source, include] (either None for
# blanks and comments), or None for a line it rejects. Importing pathspec costs more than a
# whole no-change snapshot of a large tree, and a snapshot after a turn that adds a file needs
# the rules; so the translations are kept between processes (the caller stores them, see
# `reuse_translations`) and pathspec is imported only for a line never seen.
Translation = list[Any] | None
_translations: dict[str, Translation] = {}
_KEPT_TRANSLATIONS: Final = 20_000  # more lines than that are translated but not remembered


def _translate(line: str) -> Translation:
    if line in _translations:
        return _translations[line]
    from pathspec.patterns.gitignore import GitIgnorePatternError  # noqa: PLC0415
    from pathspec.patterns.gitignore.spec import GitIgnoreSpecPattern  # noqa: PLC0415

    translated: Translation
    try:
        translated = list(GitIgnoreSpecPattern.pattern_to_regex(line))
    except (GitIgnorePatternError, re.error):
        translated = None  # a trailing backslash: git never matches it either
    if len(_translations) < _KEPT_TRANSLATIONS and _storable(line):
        _translations[line] = translated
    return translated


def _storable(line: str) -> bool:
    """A line that is valid UTF-8 (not one with undecodable bytes held as surrogates)."""
    if line.isascii():
        return True
    try:
        line.encode()
    except UnicodeEncodeError:
        return False
    return True


@lru_cache(maxsize=1)
def translator_identity() -> str:
    """Names the pathspec that translations come from (its package file, size and mtime,
    found without importing it): translations made by another one are not reused."""
    spec = importlib.machinery.PathFinder.find_spec("pathspec")
    origin = spec.origin if spec is not None else None
    if not origin:
        return ""
    try:
        st = os.stat(origin)
    except OSError:
        return ""
    return f"{origin}:{st.st_size}:{st.st_mtime_ns}"


def reuse_translations(identity: str, table: Mapping[str, Any]) -> None:
    """Take translations saved by `known_translations` (in another process), if they were made
    by the pathspec installed now; entries of the wrong shape are ignored."""
    if not identity or identity != translator_identity():
        return
    for line, translated in table.items():
        if type(line) is not str or line in _translations:
            continue
        if translated is None or (
            type(translated) is list and len(translated) == 2
            and (translated[0] is None or type(translated[0]) is str)
            and (translated[1] is None or type(translated[1]) is bool)
        ):
            _translations[line] = translated


def known_translations() -> tuple[str, dict[str, Translation]]:
    """(identity, line -> translation) of every line translated in this process so far."""
    return translator_identity(), dict(_translations)


@lru_cache(maxsize=8192)
def _parse_line(line: str) -> _Rule | None:
    """Compile one pattern line; None for blanks, comments and patterns git never matches."""
    translated = _translate(line)
    if translated is None:
        return None
    source, include = translated
    if source is None or include is None:
        return None
    try:
        return _classify(line, source, include)
    except re.error:  # a range Python rejects ("[z-a]")
        return None


def _classify(line: str, source: str, include: bool) -> _Rule:
    text = line if line.endswith("\\ ") else line.rstrip()  # pathspec's trailing-space rule
    body = text.removeprefix("!")
    dir_only = body.endswith("/")
    stem = body[:-1] if dir_only else body
    name = stem.removeprefix("**/")  # "**/x" is "x" (pathspec emits the same regex for both)
    if "/" not in name:  # no slash: matches the name at any depth
        if _plain(name):
            return _Rule(_NAME_EQ, include, dir_only, name, None)
        if name.startswith("*") and _plain(name[1:]):
            return _Rule(_NAME_SUFFIX, include, dir_only, name[1:], None)
        if source.startswith(_ANY_DIRS) and source.endswith(_NAME_ENDS):
            return _Rule(_NAME_RE, include, dir_only, "", _compile(source[len(_ANY_DIRS):]))
    if source == "." or source == _DIR_MARK:  # "*", "**", "*/", "**/": everything (dirs)
        return _Rule(_ALL, include, dir_only, "", None)
    if "/" not in name:  # an unforeseen name-only shape: match it as a path, at any depth
        return _Rule(_PATH_RE, include, dir_only, "", _compile(source), (), 0)
    segs = tuple(stem.removeprefix("/").split("/"))
    if all(_plain(seg) for seg in segs):
        return _Rule(_PATH_EQ, include, dir_only, "/".join(segs), None, segs)
    globstar = segs.index("**") if "**" in segs else -1
    # A trailing "/**" (and "/**/", which pathspec folds into "/") matches what lies inside.
    inside = (source.endswith("/") and not source.endswith(_DIR_MARK)) or body.endswith("/**/")
    kind = _PATH_INSIDE if inside else _PATH_RE
    return _Rule(kind, include, dir_only, "", _compile(source), segs, globstar)


@lru_cache(maxsize=1024)
def _compile_level(lines: tuple[str, ...]) -> _Level | None:
    rules = tuple(rule for line in lines if (rule := _parse_line(line)) is not None)
    if not rules:
        return None
    kinds = {rule.kind for rule in rules}
    always = _ALL in kinds
    name_re = None
    if _NAME_RE in kinds:
        # pathspec names its group "ps_d" in every pattern; an alternation needs it unnamed.
        parts = [r.regex.pattern for r in rules if r.kind == _NAME_RE and r.regex is not None]
        try:
            name_re = _compile("|".join(f"(?:{p.replace('(?P<ps_d>', '(?:')})" for p in parts))
        except re.error:
            always = True  # still correct: every entry then takes the exact path
    return _Level(rules, tuple(r for r in rules if r.kind >= _PATH_EQ),
                  frozenset(r.text for r in rules if r.kind == _NAME_EQ),
                  tuple(r.text for r in rules if r.kind == _NAME_SUFFIX), name_re, always)


def _matches(rule: _Rule, name: str, rel: str, is_dir: bool) -> bool:
    """Whether `rule` itself matches the entry (not merely one of its parent directories)."""
    if rule.dir_only and not is_dir:
        return False
    kind = rule.kind
    if kind == _NAME_EQ:
        return name == rule.text
    if kind == _NAME_SUFFIX:
        return name.endswith(rule.text)
    if kind == _PATH_EQ:
        return rel == rule.text
    if kind == _ALL:
        return True
    assert rule.regex is not None
    if kind == _NAME_RE:
        return rule.regex.fullmatch(name + "/" if is_dir else name) is not None
    # pathspec marks a directory with a trailing slash.
    subject = rel + "/" if is_dir else rel
    if kind == _PATH_RE:
        return rule.regex.fullmatch(subject) is not None
    # pathspec's regex also matches the directory itself ("a/" for "a/**"); git does not.
    found = rule.regex.search(subject)
    return found is not None and found.end() < len(subject)


def _reaches(rule: _Rule, index: int, name: str) -> bool:
    """Can path `rule` match inside a directory whose path below the rule's file has segment
    `name` at `index`? Conservative: a glob segment is assumed to match."""
    if 0 <= rule.globstar <= index:
        return True
    if rule.globstar < 0 and len(rule.segs) < index + 2:
        return False  # entries inside would be deeper than the pattern
    seg = rule.segs[index]
    return seg == name or not _plain(seg)


def _prefilter(frames: Sequence[_Frame], depth: int) -> _Prefilter:
    names: set[str] = set()
    suffixes: list[str] = []
    name_res: list[re.Pattern[str]] = []
    paths: list[tuple[int, _Rule]] = []
    always = False
    for frame in frames:
        level = frame.level
        names |= level.names
        suffixes += level.suffixes
        if level.name_re is not None:
            name_res.append(level.name_re)
        always = always or level.always
        below = depth - frame.depth  # segments between the level's directory and this one
        for rule in frame.live:
            if rule.globstar < 0 and len(rule.segs) != below + 1:
                continue
            if rule.kind == _PATH_EQ:
                names.add(rule.segs[-1])  # its leading segments are this directory's path
            else:
                paths.append((frame.base, rule))
    return _Prefilter(always, frozenset(names), tuple(suffixes), tuple(name_res), tuple(paths))


class DirRules:
    """The rules in force in one directory: decides for its entries, and yields its subdirectories'
    rules. Cheap to create; a directory with nothing new to apply shares its parent's prefilter."""

    __slots__ = ("_depth", "_dir", "_frames", "_live", "_out", "_owner", "_pre", "_rel")

    def __init__(self, owner: IgnoreRules, dir_: bytes, rel: str, depth: int,
                 frames: tuple[_Frame, ...], pre: _Prefilter) -> None:
        self._owner = owner
        self._dir = dir_  # absolute, ending in "/"
        self._rel = rel  # root-relative, decoded, "" or ending in "/"
        self._depth = depth
        self._frames = frames
        self._pre = pre
        self._out = owner._always_out.get(rel, _ALWAYS_OUT)
        self._live = any(frame.live for frame in frames)  # path rules to prune on enter()

    def is_ignored(self, name: bytes, *, is_dir: bool) -> bool:
        """Whether the entry `name` of this directory is left out of a snapshot."""
        n = name.decode(_FS_ENCODING, _FS_ERRORS)
        if n in self._out:
            return True
        # Most entries match nothing: answer that from set/suffix lookups and a regex or two; only
        # a candidate walks the rules in precedence order.
        always, names, suffixes, name_res, paths = self._pre
        if always or n in names or n.endswith(suffixes):
            return self._decide(n, is_dir)
        if name_res:
            subject = n + "/" if is_dir else n
            for regex in name_res:
                if regex.fullmatch(subject) is not None:
                    return self._decide(n, is_dir)
        if paths:
            rel = self._rel
            for base, rule in paths:
                if _matches(rule, n, rel[base:] + n, is_dir):
                    return self._decide(n, is_dir)
        return False

    def enter(self, name: bytes, *, listing: Container[bytes] | None = None) -> DirRules:
        """The rules inside subdirectory `name` (reads its ignore files).

        `listing`, the names in that subdirectory when the caller has already read it, saves
        the failing open of each ignore file that is not there (two syscalls per directory).
        """
        n = name.decode(_FS_ENCODING, _FS_ERRORS)
        depth = self._depth + 1
        rel = self._rel + n + "/"
        dir_ = self._dir + name + b"/"
        frames = self._frames
        pre: _Prefilter | None = self._pre  # None: rebuild
        if self._live:
            frames = self._prune(n)
            # Whether a path rule without "**" applies to entries depends on the depth.
            if frames is not self._frames or any(
                rule.globstar < 0 for frame in frames for rule in frame.live
            ):
                pre = None
        level = self._owner._read_level(dir_, listing=listing)
        if level is not None:
            frames = (*frames, _Frame(level, depth, len(rel), level.path_rules))
            pre = None
        if pre is None:
            pre = _prefilter(frames, depth)
        return DirRules(self._owner, dir_, rel, depth, frames, pre)

    def _prune(self, name: str) -> tuple[_Frame, ...]:
        """The frames for subdirectory `name`, without path rules that cannot match inside it."""
        frames: list[_Frame] = []
        changed = False
        for frame in self._frames:
            if frame.live:
                index = self._depth - frame.depth  # position of `name` below the level's directory
                live = tuple(rule for rule in frame.live if _reaches(rule, index, name))
                if len(live) != len(frame.live):
                    changed = True
                    if not live and len(frame.level.rules) == len(frame.level.path_rules):
                        continue  # nothing of this level can match there any more
                    frame = _Frame(frame.level, frame.depth, frame.base, live)
            frames.append(frame)
        return tuple(frames) if changed else self._frames

    def _decide(self, name: str, is_dir: bool) -> bool:
        # Deepest file first; within a file the last matching pattern wins (git's dir.c order).
        for frame in reversed(self._frames):
            rel = self._rel[frame.base :] + name
            for rule in reversed(frame.level.rules):
                if _matches(rule, name, rel, is_dir):
                    return rule.ignore
        return False


class IgnoreRules:
    """Ignore configuration for one workspace root; hands out the per-directory rules."""

    __slots__ = ("_always_out", "_memo", "_root_rules", "_unreadable", "_use_gitignore")
    _root_rules: DirRules

    def __init__(self, use_gitignore: bool, always_out: dict[str, frozenset[str]]) -> None:
        self._use_gitignore = use_gitignore
        self._always_out = always_out  # directory rel -> names ignored there whatever the patterns
        self._memo: dict[bytes, DirRules] = {}
        self._unreadable: list[bytes] = []

    @classmethod
    def load(
        cls,
        root: bytes,
        *,
        use_gitignore: bool = True,
        extra_patterns: Sequence[str] = (),
        excluded: Sequence[bytes] = (),
        git_excludes: GitExcludes | None = None,
    ) -> IgnoreRules:
        """Rules for the tree at absolute path `root`. `extra_patterns` act like a root ignore file
        read after the root's own; `excluded` are root-relative paths always ignored;
        `git_excludes` are git's exclude files (read here when not given; not used without
        `use_gitignore`).
        Raises ValueError for a relative root or an excluded path that is not root-relative."""
        if not os.path.isabs(root):
            raise ValueError(f"root must be an absolute path: {root!r}")
        always_out: dict[str, frozenset[str]] = {}
        for path in excluded:
            parts = path.split(b"/")
            if any(part in (b"", b".", b"..") for part in parts):
                raise ValueError(f"excluded path must be root-relative: {path!r}")
            where = "".join(p.decode(_FS_ENCODING, _FS_ERRORS) + "/" for p in parts[:-1])
            name = parts[-1].decode(_FS_ENCODING, _FS_ERRORS)
            always_out[where] = always_out.get(where, _ALWAYS_OUT) | {name}
        always_out[""] = _RootNames(always_out.get("", _ALWAYS_OUT))
        rules = cls(use_gitignore, always_out)
        extra = tuple(line for pattern in extra_patterns for line in pattern.split("\n"))
        top = root if root.endswith(b"/") else root + b"/"
        frames: tuple[_Frame, ...] = ()
        if use_gitignore:
            if git_excludes is None:
                git_excludes = read_git_excludes(os.fsdecode(root))
            # Lowest precedence first: `_decide` asks the frames from the last one down.
            for data in (git_excludes.excludes_file, git_excludes.info_exclude):
                base = _compile_level(_lines(data)) if data else None
                if base is not None:
                    frames += (_Frame(base, 0, 0, base.path_rules),)
        level = rules._read_level(top, extra)
        if level is not None:
            frames += (_Frame(level, 0, 0, level.path_rules),)
        rules._root_rules = DirRules(rules, top, "", 0, frames, _prefilter(frames, 0))
        return rules

    @property
    def unreadable(self) -> tuple[bytes, ...]:
        """Ignore files that exist but could not be read (treated as empty), absolute paths."""
        return tuple(self._unreadable)

    def root_context(self) -> DirRules:
        """The rules in force in the root directory."""
        return self._root_rules

    def is_ignored_path(self, rel: bytes, *, is_dir: bool) -> bool:
        """Whether root-relative `rel` (b"a/b/c") is ignored, itself or through an ancestor.
        Each directory's ignore files are read once per IgnoreRules; load anew to see edits."""
        parts = rel.split(b"/")
        rules = self._root_rules
        for i, part in enumerate(parts[:-1]):
            if rules.is_ignored(part, is_dir=True):
                return True
            key = b"/".join(parts[: i + 1])
            entered = self._memo.get(key)
            if entered is None:
                entered = self._memo[key] = rules.enter(part)
            rules = entered
        return rules.is_ignored(parts[-1], is_dir=is_dir)

    def _read_level(self, directory: bytes, extra: tuple[str, ...] = (),
                    listing: Container[bytes] | None = None) -> _Level | None:
        lines: list[str] = []
        for name in (GITIGNORE, CKPTIGNORE) if self._use_gitignore else (CKPTIGNORE,):
            if listing is not None and name not in listing:
                continue
            path = directory + name
            try:
                fd = os.open(path, _OPEN_FLAGS)
            except (FileNotFoundError, NotADirectoryError):
                continue  # the common case: no such ignore file here
            except OSError:  # unreadable, or a symlink (ELOOP)
                self._unreadable.append(path)
                continue
            data = self._read(fd, path)
            if data:
                lines += _lines(data)
        lines += extra
        return _compile_level(tuple(lines)) if lines else None

    def _read(self, fd: int, path: bytes) -> bytes:
        try:
            if stat.S_ISREG(os.fstat(fd).st_mode):
                chunks = []
                while chunk := os.read(fd, 1 << 16):
                    chunks.append(chunk)
                return b"".join(chunks)
        except OSError:
            pass
        finally:
            os.close(fd)
        self._unreadable.append(path)  # not a regular file, or a read error: counts as empty
        return b""


def _lines(data: bytes) -> tuple[str, ...]:
    """The pattern lines of an ignore file's bytes. Like git: a UTF-8 BOM is skipped and the
    CR of a CRLF dropped."""
    text = data.removeprefix(b"\xef\xbb\xbf").decode(_FS_ENCODING, _FS_ERRORS)
    return tuple(line.removesuffix("\r") for line in text.split("\n"))
