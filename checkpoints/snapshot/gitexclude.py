"""Git's ignore sources outside the work tree: the repository's `info/exclude` and the user's
`core.excludesFile`, as git finds them for a work tree whose top is the root.

Where git looks (and so where this looks): the git directory is `<root>/.git`, or the one a
`.git` file names (`gitdir: …`, with the `commondir` of a linked worktree); `info/exclude`
lies in its common directory. `core.excludesFile` is the last value set in the config files
git reads, in its order: the system file (`$GIT_CONFIG_SYSTEM`, else `/etc/gitconfig`; none
with `$GIT_CONFIG_NOSYSTEM`), the global files (`$GIT_CONFIG_GLOBAL`, else
`$XDG_CONFIG_HOME/git/config` (default `~/.config/git/config`) then `~/.gitconfig`), then the
repository's `config`. Unset, it is `$XDG_CONFIG_HOME/git/ignore` (default
`~/.config/git/ignore`). A leading `~/` or `~user/` is expanded, a relative path is relative
to the root (git runs at the top of the work tree). Not followed: `include`/`includeIf`
sections, `-c`/`GIT_CONFIG_COUNT` overrides, `GIT_DIR`, and the repository of a root that lies
below a work tree's top (as the `.gitignore` files above the root, they are not read).

It parses files and never runs git: a snapshot must not spawn a process. It reads nothing in
the walked tree but `<root>/.git`, follows symlinks as git does for these files, reads only
regular files (no FIFO wait) up to `MAX_BYTES`, and raises nothing: a file it cannot read
counts as empty. `GitExcludes.identity` names what was read, so that a stat cache made under
other contents is not trusted for whole directories (these files lie outside the walk).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from ckpt.objstore import hash_bytes

MAX_BYTES: Final = 4 << 20  # larger files are read up to this much (git reads any size)
_OPEN_FLAGS: Final = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC


@dataclass(frozen=True, slots=True)
class GitExcludes:
    """The contents of git's two exclude files for one root ("" where there is none)."""

    excludes_file: bytes  # core.excludesFile: the lowest precedence
    info_exclude: bytes  # <git dir>/info/exclude: above core.excludesFile, below .gitignore
    identity: str = ""  # digest of where both came from and what they hold

    @property
    def empty(self) -> bool:
        return not self.excludes_file and not self.info_exclude


NO_EXCLUDES: Final = GitExcludes(b"", b"", "")


def read_file(path: str) -> bytes | None:
    """A regular file's bytes (symlinks followed), or None where it cannot be read."""
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except (OSError, ValueError):
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        chunks: list[bytes] = []
        size = 0
        while size < MAX_BYTES and (chunk := os.read(fd, min(1 << 16, MAX_BYTES - size))):
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


def git_common_dir(root: str) -> str | None:
    """The directory holding the config and `info/` of the repository whose work tree top is
    `root`, or None when `root` has no `.git`."""
    dot_git = os.path.join(root, ".git")
    try:
        st = os.lstat(dot_git)
    except OSError:
        return None
    if stat.S_ISDIR(st.st_mode):
        git_dir = dot_git
    elif stat.S_ISREG(st.st_mode):  # a linked worktree or a submodule: "gitdir: <path>"
        data = read_file(dot_git) or b""
        line = data.split(b"\n", 1)[0].rstrip(b"\r")
        if not line.startswith(b"gitdir:"):
            return None
        git_dir = os.path.join(root, os.fsdecode(line[len(b"gitdir:"):].strip()))
    else:
        return None
    common = read_file(os.path.join(git_dir, "commondir"))
    if common is not None and common.strip():
        return os.path.normpath(os.path.join(git_dir, os.fsdecode(common.strip())))
    return git_dir


def config_value(data: bytes, section: str, key: str) -> bytes | None:
    """The last value of `section.key` (no subsection; names compared without case) in git
    config text, or None. A key without "=" (git's boolean true) gives None."""
    value: bytes | None = None
    current = b""
    want_section, want_key = section.lower().encode(), key.lower().encode()
    lines = data.split(b"\n")
    index = 0
    while index < len(lines):
        line = lines[index].lstrip(b" \t\r")
        index += 1
        if line.startswith(b"["):
            end = line.find(b"]")
            if end < 0:
                current = b""
                continue
            header = line[1:end].strip()
            # [section "sub"] and the old [section.sub] name subsections: not ours.
            current = header.lower() if b" " not in header and b"." not in header \
                else b"\0"
            line = line[end + 1:].lstrip(b" \t")
        if not line or line[0] in b"#;\r":
            continue
        name, eq, rest = line.partition(b"=")
        name = name.strip(b" \t\r")
        if current != want_section or name.lower() != want_key:
            continue
        if not eq:
            value = None
            continue
        value, index = _parse_value(rest, lines, index)
    return value


def _parse_value(rest: bytes, lines: list[bytes], index: int) -> tuple[bytes, int]:
    """A config value as git reads it: quotes, escapes, comments, a trailing backslash
    continuing on the next line, inner whitespace runs kept and outer ones dropped."""
    out = bytearray()
    quoted = False
    spaces = 0
    text = rest
    pos = 0
    while True:
        if pos >= len(text):
            break
        char = text[pos]
        pos += 1
        if char == 0x5C:  # backslash
            if pos >= len(text) or text[pos:].rstrip(b"\r") == b"":
                if index < len(lines):  # a continuation line
                    text, pos = lines[index], 0
                    index += 1
                    continue
                break
            escaped = text[pos]
            pos += 1
            out += b" " * spaces
            spaces = 0
            out.append({0x6E: 0x0A, 0x74: 0x09, 0x62: 0x08}.get(escaped, escaped))
            continue
        if char in b" \t\r" and not quoted:
            if out:
                spaces += 1
            continue
        if char in b"#;" and not quoted:
            break
        if char == 0x22:  # double quote
            out += b" " * spaces
            spaces = 0
            quoted = not quoted
            continue
        out += b" " * spaces
        spaces = 0
        out.append(char)
    return bytes(out), index


def _config_files(common: str | None, env: Mapping[str, str], home: str) -> list[str]:
    files: list[str] = []
    if not env.get("GIT_CONFIG_NOSYSTEM"):
        files.append(env.get("GIT_CONFIG_SYSTEM") or "/etc/gitconfig")
    if env.get("GIT_CONFIG_GLOBAL"):
        files.append(env["GIT_CONFIG_GLOBAL"])
    else:
        files.append(os.path.join(_xdg_home(env, home), "git", "config"))
        if home:
            files.append(os.path.join(home, ".gitconfig"))
    if common is not None:
        files.append(os.path.join(common, "config"))
    return files


def _xdg_home(env: Mapping[str, str], home: str) -> str:
    return env.get("XDG_CONFIG_HOME") or os.path.join(home, ".config")


def _expand(path: bytes, root: str, home: str) -> str:
    text = os.fsdecode(path)
    if text == "~" or text.startswith("~/"):
        text = home + text[1:]
    elif text.startswith("~"):
        text = os.path.expanduser(text)
    return os.path.join(root, text)  # a relative path: relative to the top of the work tree


def read_git_excludes(root: str, env: Mapping[str, str] | None = None) -> GitExcludes:
    """Git's exclude files for the work tree at absolute `root` (see the module), as
    `env` (default: the process's environment) places them."""
    env = os.environ if env is None else env
    home = env.get("HOME", "")
    common = git_common_dir(root)
    found: bytes | None = None
    for config in _config_files(common, env, home):
        data = read_file(config)
        value = config_value(data, "core", "excludesFile") if data else None
        if value is not None:
            found = value
    excludes_path: str | None = None
    if found is not None:  # set to "": no file at all, not the default
        excludes_path = _expand(found, root, home) if found else None
    elif home or env.get("XDG_CONFIG_HOME"):
        excludes_path = os.path.join(_xdg_home(env, home), "git", "ignore")
    excludes = (read_file(excludes_path) or b"") if excludes_path else b""
    info_path = os.path.join(common, "info", "exclude") if common is not None else None
    info = (read_file(info_path) or b"") if info_path else b""
    if not excludes and not info:
        return NO_EXCLUDES
    named = b"\0".join(os.fsencode(p or "") for p in (excludes_path, info_path))
    identity = hash_bytes(b"\0".join((named, excludes, info))).hex()[:32]
    return GitExcludes(excludes, info, identity)
