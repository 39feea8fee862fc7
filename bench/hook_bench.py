"""What `ckpt hook claude-code` costs an agent per tool call: `python -m bench.hook_bench`.

Claude Code runs the hook as a command before and after each matching tool call, so its cost
is a process start plus one checkpoint. This runs 50 calls (`--calls`) the way Claude Code
does: the recorded payloads of tests/fixtures/claude_hooks (Pre/PostToolUse of Write, Edit and
Bash) in turn, each on stdin of a new `ckpt hook claude-code` process, with the tool's edit
made between its pre and post call, on a seeded project of `--files` source-like files. It
prints the median and p90 wall time per call, beside the floor any Python command pays (an
interpreter start, `ckpt --version`) and a plain `ckpt create` of the same tree.

Not a test: it asserts only that every call exited 0, kept stdout empty and made its
checkpoint. Numbers go in bench/README.md ("Hook adapter").
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "claude_hooks"
CYCLE = ["pre_write.json", "post_write.json", "pre_edit.json", "post_edit.json",
         "pre_bash.json", "post_bash.json"]
WORDS = ["def", "return", "self", "value", "import", "class", "for", "in", "if", "else", "None"]


def make_project(root: Path, files: int, seed: int) -> None:
    """`files` source-like files of 0.5-16 KiB in a fan-out of directories (seeded)."""
    rng = random.Random(seed)
    (root / "src").mkdir(parents=True)
    (root / "src" / "app.py").write_text("print('v1')\n")
    (root / "notes.txt").write_text("notes\n")
    for i in range(files):
        folder = root / f"pkg{i % 40:02}" / f"mod{i % 7}"
        folder.mkdir(parents=True, exist_ok=True)
        size = int(2 ** rng.uniform(9, 14))
        words = " ".join(rng.choice(WORDS) for _ in range(size // 5))
        (folder / f"f{i:05}.py").write_text(words[:size] + "\n")


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("CKPT_", "CLAUDE_"))}


def _ckpt() -> list[str]:
    """The command Claude Code runs: the console script, else `python -m ckpt`."""
    found = shutil.which("ckpt")
    return [found] if found else [sys.executable, "-m", "ckpt"]


def _timed(argv: list[str], stdin: bytes, cwd: Path) -> tuple[float, subprocess.CompletedProcess[bytes]]:
    started = time.perf_counter()
    done = subprocess.run(argv, input=stdin, cwd=cwd, env=_env(), capture_output=True,
                          check=False, timeout=300)
    return time.perf_counter() - started, done


def _stats(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    p90 = ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]
    return {"median_ms": round(statistics.median(ordered) * 1000, 1),
            "p90_ms": round(p90 * 1000, 1), "n": len(ordered)}


def run(calls: int, files: int, seed: int, samples: int = 20) -> dict[str, dict[str, float]]:
    with tempfile.TemporaryDirectory(prefix="ckpt-hook-bench-") as tmp:
        root = Path(tmp, "project").resolve()
        make_project(root, files, seed)
        ckpt = _ckpt()
        subprocess.run([*ckpt, "--root", str(root), "init"], check=True, env=_env(),
                       capture_output=True)
        subprocess.run([*ckpt, "--root", str(root), "create"], check=True, env=_env(),
                       capture_output=True)  # the first, full snapshot is not a hook's cost
        elsewhere = Path(tmp)
        hook: list[float] = []
        for n in range(calls):
            name = CYCLE[n % len(CYCLE)]
            if name.startswith("post_"):  # the tool ran: an edit between pre and post
                (root / "src" / "app.py").write_text(f"print('v{n}')\n")
            stdin = (FIXTURES / name).read_text().replace("$PROJECT", str(root)).encode()
            took, done = _timed([*ckpt, "hook", "claude-code"], stdin, elsewhere)
            assert (done.returncode, done.stdout, done.stderr) == (0, b"", b""), done.stderr
            hook.append(took)
        listed = subprocess.run([*ckpt, "--root", str(root), "--session",
                                 "claude-9f1c2a7e-4b1d-4a6e-9d8e-2f3b5c6d7e8f", "list", "--json"],
                                env=_env(), capture_output=True, check=True)
        assert len(json.loads(listed.stdout)) == calls
        floor = [_timed([sys.executable, "-c", "pass"], b"", elsewhere)[0]
                 for _ in range(samples)]
        version = [_timed([*ckpt, "--version"], b"", elsewhere)[0] for _ in range(samples)]
        create = [_timed([*ckpt, "--root", str(root), "create"], b"", elsewhere)[0]
                  for _ in range(samples)]
    return {"python -c pass": _stats(floor), "ckpt --version": _stats(version),
            "ckpt create": _stats(create), "ckpt hook claude-code": _stats(hook)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=26)
    parser.add_argument("--samples", type=int, default=20, help="runs of each baseline")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    results = run(args.calls, args.files, args.seed, args.samples)
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"{args.files} files, {args.calls} hook calls; wall time per process")
    print(f"{'command':<24} {'median ms':>10} {'p90 ms':>8} {'n':>4}")
    for name, row in results.items():
        print(f"{name:<24} {row['median_ms']:>10} {row['p90_ms']:>8} {int(row['n']):>4}")


if __name__ == "__main__":
    main()
