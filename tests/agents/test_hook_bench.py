"""bench/hook_bench.py cannot rot: a few calls on a small tree run, each hook call exits 0
with empty output and makes its checkpoint (the bench asserts that), and every row is there.
No timing is asserted here (timings belong to bench/)."""

from __future__ import annotations

from bench.hook_bench import run


def test_the_hook_bench_runs_at_a_small_scale() -> None:
    results = run(calls=6, files=20, seed=1, samples=1)
    assert set(results) == {"python -c pass", "ckpt --version", "ckpt create",
                            "ckpt hook claude-code"}
    assert results["ckpt hook claude-code"]["n"] == 6
