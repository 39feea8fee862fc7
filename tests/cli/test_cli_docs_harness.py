"""README's "Using ckpt from a harness": its shell session runs as written, through the
resident server it starts (its Python example runs in test_cli_docs.py with every block)."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import servers  # tests/ is on pytest's `pythonpath`

README = Path(__file__).resolve().parents[2] / "README.md"


def harness_section() -> str:
    text = README.read_text(encoding="utf-8")
    return text.split("\n## Using ckpt from a harness\n", 1)[1].split("\n## ", 1)[0]


def test_the_shell_session_runs_as_written_through_the_server(tmp_path: Path) -> None:
    (block,) = re.findall(r"^```sh\n(.*?)^```", harness_section(), re.DOTALL | re.MULTILINE)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CKPT_")}
    env["TMPDIR"] = str(tmp_path)  # mktemp -d
    try:
        done = subprocess.run(["bash", "-euo", "pipefail", "-c", block], env=env,
                              capture_output=True, text=True, timeout=120, check=False)
        stores = servers.find_server_locks(tmp_path)
    finally:
        servers.reap_servers_under(tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    opening = lines.index("[")
    diff = json.loads("\n".join(lines[opening:lines.index("]", opening) + 1]))
    assert [(c["change"], c["path"]) for c in diff] == [("M", "app.py")]
    assert "running: true" in lines
    assert lines[-1].startswith("ckpt server stopped (pid ")
    assert len(stores) == 1  # the one store's server, started by a call, stopped by the last
    assert not servers.alive(servers.read_lock_pid(stores[0]) or 0)
