"""Local commands never load the remote layer or the S3 client: `import ckpt.objstore` does not,
`ckpt list` does not, and the remote package's errors and URL parser load without obstore."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

_REPORT = ("remote = sorted(m for m in sys.modules if m.startswith('ckpt.objstore.remote') "
           "or m.split('.')[0] == 'obstore')\nprint(remote, file=sys.stderr)\n")


def _run(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HOME": str(cwd), "CKPT_SERVER": "off"}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=60, check=False)


def test_import_objstore_and_checkpoints_do_not_load_the_remote_layer(tmp_path: Path) -> None:
    done = _run("import sys\nimport ckpt.objstore, ckpt.checkpoints\n" + _REPORT, tmp_path)
    assert done.stderr.strip().splitlines()[-1] == "[]", done.stderr


def test_ckpt_list_does_not_load_the_remote_layer(tmp_path: Path) -> None:
    setup = ("import sys\nfrom ckpt.cli.main import run\n"
             "assert run(['init']) == 0\nassert run(['create']) == 0\n")
    assert _run(setup, tmp_path).returncode == 0
    listing = "import sys\nfrom ckpt.cli.main import run\nassert run(['list']) == 0\n" + _REPORT
    done = _run(listing, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip().splitlines()[-1] == "[]", done.stderr


def test_remote_errors_and_urls_load_without_the_s3_client(tmp_path: Path) -> None:
    code = ("import sys\nfrom ckpt.objstore.remote import RemoteError, parse_remote_url\n"
            "parse_remote_url('s3://bucket-1/p')\n"
            "print('obstore' in sys.modules, file=sys.stderr)\n"
            "from ckpt.objstore.remote import RemoteRepo\n"
            "print('obstore' in sys.modules, file=sys.stderr)\n")
    done = _run(code, tmp_path)
    assert done.stderr.split() == ["False", "True"], done.stderr
