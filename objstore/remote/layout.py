"""The keys of a remote repository under its prefix, and its `config` file. Pure.

    config                 b"ckpt-remote 1\\n" + msgpack {"id": 16 hex, "created": ns}
    packs/<hh>/<packid>    a pack in the local pack format (objstore/packfile.py); packid is
                           the BLAKE3 hex of its bytes, hh its first two characters
    index/<packid>         its index in the local index format, written after the pack is
                           complete (a pack with no index is garbage)
    refs/<packid>          msgpack [[oid, ref], ...]: the dictionary or delta base each of the
                           pack's envelopes needs (`codec.envelope_refs`), written before the
                           index and only for a pack that has such envelopes; gc reads it
    records/<name>         opaque named bytes (the layers above put checkpoint records here)
    heads/<name>           opaque named bytes, read-modify-written with If-Match
    locks/<random>         msgpack {"kind", "host", "pid", "time"}
"""

from __future__ import annotations

import re

from ckpt.objstore import codec

CONFIG_KEY = "config"
CONFIG_MAGIC = b"ckpt-remote 1\n"
PACKS = "packs/"
INDEX = "index/"
REFS = "refs/"
RECORDS = "records/"
HEADS = "heads/"
LOCKS = "locks/"

_NAME = re.compile(r"[A-Za-z0-9_~-][A-Za-z0-9._~-]{0,199}")
_PACK_ID = re.compile(r"[0-9a-f]{64}")


def pack_key(packid: str) -> str:
    return f"{PACKS}{packid[:2]}/{packid}"


def index_key(packid: str) -> str:
    return f"{INDEX}{packid}"


def refs_key(packid: str) -> str:
    return f"{REFS}{packid}"


def packid_of(key: str, prefix: str) -> str | None:
    """The pack id at the end of a listed `key` under `prefix`, None for a foreign key."""
    name = key.rsplit("/", 1)[-1]
    return name if key.startswith(prefix) and _PACK_ID.fullmatch(name) else None


def check_name(name: str, what: str) -> str:
    """A record or head name usable as one key component; ValueError otherwise."""
    if not _NAME.fullmatch(name):
        raise ValueError(f"{what} name {name!r} is not allowed on a remote (letters, digits and "
                         f"._~- only, at most 200, not starting with a dot)")
    return name


def encode_config(repo_id: str, created_ns: int) -> bytes:
    return CONFIG_MAGIC + codec.pack_data({"id": repo_id, "created": created_ns})


def decode_config(data: bytes) -> tuple[str, int] | None:
    """(id, created) of a ckpt remote's config; None if it is not one this version reads."""
    if not data.startswith(CONFIG_MAGIC):
        return None
    try:
        value = codec.unpack_data(data[len(CONFIG_MAGIC):], what="remote config")
    except ValueError:
        return None
    if (not isinstance(value, dict) or not isinstance(value.get("id"), str)
            or not isinstance(value.get("created"), int)):
        return None
    return value["id"], value["created"]
