"""What changed between two trees, and how it is shown.

Lives here: the manifest diff (`trees.py`: `Change`, `diff_trees`, skipping equal subtrees
by id), git-format patches (`patch.py`) and the line diff behind them (`linediff.py`).
All of it is pure: blobs are read through a callable, nothing here does IO or reads a clock.

Must not live here: deciding what to restore (`restore/plan.py`), printing (the CLI). This
package imports only the base modules at the top and objstore (tests/test_layers.py).
"""
