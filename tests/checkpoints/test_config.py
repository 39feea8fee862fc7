"""StoreConfig and config.toml: defaults, round trips, validation, user-typed values, atomicity."""

from __future__ import annotations

import dataclasses
import os
import stat
import tomllib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ckpt.checkpoints.config import (
    CONFIG_KEYS,
    StoreConfig,
    encode_config,
    get_config_value,
    read_config,
    set_config_value,
    write_config,
)
from ckpt.checkpoints.errors import CheckpointError, ConfigError

NON_DEFAULT = StoreConfig(
    compression_level=19, threads=8, fsync="full", max_file_size=0, retention_cap=50,
    extra_ignore=("*.log", "build/", "!keep.log"), use_gitignore=False, gc_grace_seconds=0,
    lock_timeout=0.25, server="off", server_idle=0, server_verify=60, dictionaries=False,
    deltas=False, delta_chain=3, block_size=256 << 10,
)

NEEDS_ESCAPES = ('quote"d', "back\\slash", "tab\there", "bell\x07", "del\x7f",
                 "esc\x1b[0m", "ünïcødé ✓", "#not-a-comment", "[not-a-table]", "trailing space ",
                 "'single'", '"""', "\\u0041", "\u2028sep", "")


def write_toml(store: Path, text: str) -> None:
    (store / "config.toml").write_text(text, encoding="utf-8")


def test_missing_file_gives_defaults(tmp_path: Path) -> None:
    assert read_config(str(tmp_path)) == StoreConfig()
    assert read_config(str(tmp_path / "no-such-store")) == StoreConfig()


def test_defaults_are_the_documented_ones() -> None:
    cfg = StoreConfig()
    assert (cfg.compression_level, cfg.threads, cfg.fsync, cfg.max_file_size) == (
        1, 0, "batch", 100 * 1024 * 1024)
    assert (cfg.retention_cap, cfg.extra_ignore, cfg.use_gitignore) == (0, (), True)
    assert (cfg.gc_grace_seconds, cfg.lock_timeout) == (3600, 10.0)
    assert tuple(f.name for f in dataclasses.fields(StoreConfig)) == CONFIG_KEYS


def test_keys_missing_from_the_file_take_defaults(tmp_path: Path) -> None:
    write_toml(tmp_path, "threads = 4\n")
    assert read_config(str(tmp_path)) == StoreConfig(threads=4)


def test_every_field_round_trips(tmp_path: Path) -> None:
    for field in dataclasses.fields(StoreConfig):
        assert getattr(NON_DEFAULT, field.name) != field.default, field.name
    write_config(str(tmp_path), NON_DEFAULT)
    assert read_config(str(tmp_path)) == NON_DEFAULT
    with open(tmp_path / "config.toml", "rb") as f:
        assert set(tomllib.load(f)) == set(CONFIG_KEYS)  # every key written, defaults too


def test_strings_needing_escapes_round_trip(tmp_path: Path) -> None:
    cfg = StoreConfig(extra_ignore=NEEDS_ESCAPES)
    write_config(str(tmp_path), cfg)
    assert read_config(str(tmp_path)).extra_ignore == NEEDS_ESCAPES


@given(st.lists(st.text(st.characters(codec="utf-8", exclude_characters="\n\r\0"))))
def test_any_valid_pattern_list_round_trips_through_toml(patterns: list[str]) -> None:
    cfg = StoreConfig(extra_ignore=tuple(patterns), lock_timeout=1e-7)
    assert StoreConfig(**tomllib.loads(encode_config(cfg))) == cfg


@pytest.mark.parametrize("timeout", [0.0, 1e-7, 0.1, 3.0, 1e16, 12345.678])
def test_float_seconds_round_trip_exactly(tmp_path: Path, timeout: float) -> None:
    write_config(str(tmp_path), StoreConfig(lock_timeout=timeout))
    assert read_config(str(tmp_path)).lock_timeout == timeout


def test_unknown_key_names_the_key_and_the_file(tmp_path: Path) -> None:
    write_toml(tmp_path, "compression_level = 3\ncompresion_level = 5\n")
    with pytest.raises(ConfigError) as caught:
        read_config(str(tmp_path))
    assert caught.value.key == "compresion_level"
    assert str(tmp_path / "config.toml") in str(caught.value)
    assert isinstance(caught.value, CheckpointError) and isinstance(caught.value, ValueError)


def test_a_table_is_an_unknown_key(tmp_path: Path) -> None:
    write_toml(tmp_path, "[ignore]\npatterns = []\n")
    with pytest.raises(ConfigError) as caught:
        read_config(str(tmp_path))
    assert caught.value.key == "ignore"


@pytest.mark.parametrize(("key", "toml"), [
    ("compression_level", '"3"'), ("compression_level", "3.0"), ("threads", "true"),
    ("fsync", "1"), ("fsync", "true"), ("max_file_size", '"64M"'), ("max_file_size", "1.5"),
    ("retention_cap", "[]"), ("extra_ignore", '"*.log"'), ("extra_ignore", "[1, 2]"),
    ("extra_ignore", "{a = 1}"), ("use_gitignore", '"yes"'), ("use_gitignore", "1"),
    ("gc_grace_seconds", "1.5"), ("lock_timeout", '"10"'), ("lock_timeout", "false"),
])
def test_wrong_type_names_the_key(tmp_path: Path, key: str, toml: str) -> None:
    write_toml(tmp_path, f"{key} = {toml}\n")
    with pytest.raises(ConfigError) as caught:
        read_config(str(tmp_path))
    assert caught.value.key == key
    assert str(tmp_path / "config.toml") in caught.value.reason


@pytest.mark.parametrize(("key", "toml"), [
    ("compression_level", "20"), ("compression_level", "-1"), ("threads", "-1"),
    ("threads", "100000"), ("fsync", '"always"'), ("fsync", '"Batch"'), ("max_file_size", "-1"),
    ("retention_cap", "-5"), ("gc_grace_seconds", "-1"), ("lock_timeout", "-0.5"),
    ("lock_timeout", "inf"), ("lock_timeout", "nan"), ("extra_ignore", '["a\\nb"]'),
    ("extra_ignore", '["nul\\u0000"]'), ("max_file_size", str(2**63)),
])
def test_out_of_range_names_the_key(tmp_path: Path, key: str, toml: str) -> None:
    write_toml(tmp_path, f"{key} = {toml}\n")
    with pytest.raises(ConfigError) as caught:
        read_config(str(tmp_path))
    assert caught.value.key == key


@pytest.mark.parametrize("text", ["compression_level = \n", "threads = 4\nthreads = 5\n",
                                  "= 3\n", "fsync = 'unterminated\n", "[[broken\n"])
def test_toml_syntax_error_names_the_file(tmp_path: Path, text: str) -> None:
    write_toml(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        read_config(str(tmp_path))
    assert caught.value.key is None
    assert str(tmp_path / "config.toml") in str(caught.value)


def test_non_utf8_file_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_bytes(b'fsync = "\xff"\n')
    with pytest.raises(ConfigError, match=r"config\.toml"):
        read_config(str(tmp_path))


def test_unreadable_config_path_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "config.toml").mkdir()
    with pytest.raises(ConfigError, match=r"config\.toml"):
        read_config(str(tmp_path))


def test_building_a_bad_config_directly_raises_config_error() -> None:
    with pytest.raises(ConfigError) as caught:
        StoreConfig(compression_level=42)
    assert caught.value.key == "compression_level"
    with pytest.raises(ConfigError) as caught:
        dataclasses.replace(StoreConfig(), fsync="sometimes")
    assert caught.value.key == "fsync"


def test_equal_settings_compare_and_hash_equal_however_spelled() -> None:
    spelled = StoreConfig(extra_ignore=["a", "b"], lock_timeout=10)  # type: ignore[arg-type]
    assert spelled == StoreConfig(extra_ignore=("a", "b"))
    assert isinstance(spelled.extra_ignore, tuple) and isinstance(spelled.lock_timeout, float)
    assert hash(spelled) == hash(StoreConfig(extra_ignore=("a", "b")))


def test_effective_threads_resolves_auto() -> None:
    assert StoreConfig(threads=3).effective_threads() == 3
    assert StoreConfig().effective_threads() == (os.cpu_count() or 1)


@pytest.mark.parametrize(("key", "text", "expected"), [
    ("max_file_size", "123", 123), ("max_file_size", "0", 0), ("max_file_size", "64M", 64 << 20),
    ("max_file_size", "1G", 1 << 30), ("max_file_size", "100KiB", 102400),
    ("max_file_size", " 2k ", 2048), ("max_file_size", "1.5G", 3 << 29),
    ("max_file_size", "10MB", 10_000_000), ("max_file_size", "1T", 1 << 40),
    ("max_file_size", "512B", 512), ("max_file_size", "4 MiB", 4 << 20),
    ("compression_level", "0", 0), ("compression_level", "19", 19), ("threads", "16", 16),
    ("retention_cap", "1_000", 1000), ("gc_grace_seconds", "60", 60),
    ("lock_timeout", "2.5", 2.5), ("lock_timeout", "0", 0.0),
    ("fsync", "FULL", "full"), ("fsync", " none ", "none"),
    ("use_gitignore", "no", False), ("use_gitignore", "YES", True),
    ("use_gitignore", "0", False), ("use_gitignore", "1", True),
    ("use_gitignore", "false", False), ("use_gitignore", "On", True),
    ("extra_ignore", "*.log, build/ ,,!keep.log", ("*.log", "build/", "!keep.log")),
    ("extra_ignore", "", ()), ("extra_ignore", "single", ("single",)),
])
def test_set_config_value_parses_writes_and_returns(tmp_path: Path, key: str, text: str,
                                                    expected: Any) -> None:
    cfg = set_config_value(str(tmp_path), key, text)
    assert get_config_value(cfg, key) == expected
    assert read_config(str(tmp_path)) == cfg


@pytest.mark.parametrize(("key", "text"), [
    ("compression_level", "three"), ("compression_level", "20"), ("compression_level", ""),
    ("threads", "1.5"), ("threads", "-2"), ("max_file_size", "0.1K"), ("max_file_size", "12Q"),
    ("max_file_size", "-1M"), ("max_file_size", "M"), ("max_file_size", "1e6"),
    ("use_gitignore", "maybe"), ("use_gitignore", ""), ("lock_timeout", "nan"),
    ("lock_timeout", "soon"), ("fsync", "sometimes"), ("extra_ignore", "a\nb"),
    ("no_such_key", "1"),
])
def test_set_config_value_rejects_bad_text_and_writes_nothing(tmp_path: Path, key: str,
                                                              text: str) -> None:
    with pytest.raises(ConfigError) as caught:
        set_config_value(str(tmp_path), key, text)
    assert caught.value.key == key
    assert os.listdir(tmp_path) == []


def test_set_config_value_keeps_the_other_settings(tmp_path: Path) -> None:
    write_config(str(tmp_path), NON_DEFAULT)
    cfg = set_config_value(str(tmp_path), "threads", "2")
    assert cfg == dataclasses.replace(NON_DEFAULT, threads=2) == read_config(str(tmp_path))


def test_set_config_value_refuses_to_overwrite_a_broken_file(tmp_path: Path) -> None:
    write_toml(tmp_path, "threads = = 4\n")
    with pytest.raises(ConfigError):
        set_config_value(str(tmp_path), "threads", "2")
    assert (tmp_path / "config.toml").read_text() == "threads = = 4\n"


def test_get_config_value_of_every_key_and_unknown_key() -> None:
    for key in CONFIG_KEYS:
        assert get_config_value(NON_DEFAULT, key) == getattr(NON_DEFAULT, key)
    with pytest.raises(ConfigError) as caught:
        get_config_value(NON_DEFAULT, "colour")
    assert caught.value.key == "colour"


def test_write_replaces_atomically_and_leaves_no_temp_files(tmp_path: Path) -> None:
    write_config(str(tmp_path), StoreConfig())
    with open(tmp_path / "config.toml", "rb") as old:  # a reader that opened the old version
        write_config(str(tmp_path), NON_DEFAULT)
        set_config_value(str(tmp_path), "retention_cap", "7")
        # Renamed over, not rewritten in place: the open reader still sees the whole old file.
        assert StoreConfig(**tomllib.load(old)) == StoreConfig()
    assert os.listdir(tmp_path) == ["config.toml"]
    assert read_config(str(tmp_path)) == dataclasses.replace(NON_DEFAULT, retention_cap=7)
    assert stat.S_IMODE(os.stat(tmp_path / "config.toml").st_mode) == 0o644


def test_failed_write_leaves_no_temp_file(tmp_path: Path) -> None:
    (tmp_path / "config.toml").mkdir()  # os.replace onto a directory fails
    with pytest.raises(OSError):
        write_config(str(tmp_path), NON_DEFAULT)
    assert os.listdir(tmp_path) == ["config.toml"]
    assert (tmp_path / "config.toml").is_dir()
