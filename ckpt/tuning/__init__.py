"""The logic behind `ckpt bench`: measuring ckpt's settings on a user's own tree.

`ckpt.tuning.tune` runs the settings grid on a scratch copy and recommends one (`run_tuning`,
`render_table`); `ckpt.tuning.workload` is the seeded agent-like turn and the tree-size measure
it applies, shared with the benchmarks in `bench/` (which import it without loading the library).

Both use only the public API of `ckpt.checkpoints`. Nothing is imported here, so that
`import ckpt.tuning.workload` stays free of the library.
"""
