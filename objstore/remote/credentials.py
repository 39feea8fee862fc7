"""Where the S3 settings of a remote come from, besides its URL: the standard AWS environment
variables and the shared ~/.aws files, never ckpt's own config.

Read, first hit wins:
- keys: AWS_ACCESS_KEY_ID + AWS_SECRET_ACCESS_KEY (+ AWS_SESSION_TOKEN); else the profile
  (AWS_PROFILE, else "default") of AWS_SHARED_CREDENTIALS_FILE (~/.aws/credentials), then of
  AWS_CONFIG_FILE (~/.aws/config): aws_access_key_id, aws_secret_access_key, aws_session_token.
  Static keys only (no SSO, no assume-role). Without any, the S3 client's own chain is left to
  find them (container or web-identity credentials, EC2 instance metadata) unless
  AWS_EC2_METADATA_DISABLED is true, where the remote refuses at once (RemoteAuthError).
- region: the remote's own, AWS_REGION, AWS_DEFAULT_REGION, the profile's `region`, us-east-1.
- endpoint: the remote's own, AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, the profile's
  `endpoint_url`, else AWS's.

Pure reading: nothing here talks to the network or writes a file.
"""

from __future__ import annotations

import configparser
import os
from collections.abc import Mapping
from dataclasses import dataclass

DEFAULT_REGION = "us-east-1"


@dataclass(frozen=True, slots=True)
class S3Settings:
    access_key_id: str | None
    secret_access_key: str | None
    session_token: str | None
    region: str
    endpoint: str | None
    metadata_allowed: bool  # may the client ask the EC2 instance metadata for credentials


def _profile_sections(path: str, profile: str, *, config_file: bool) -> dict[str, str]:
    parser = configparser.RawConfigParser()
    try:
        parser.read(path, encoding="utf-8")
    except (configparser.Error, UnicodeDecodeError):
        return {}
    names = [profile] if not config_file else (
        ["default"] if profile == "default" else [f"profile {profile}", profile])
    for name in names:
        if parser.has_section(name):
            return {k.lower(): v.strip() for k, v in parser.items(name)}
    return {}


def read_settings(*, endpoint: str | None, region: str | None,
                  environ: Mapping[str, str] | None = None) -> S3Settings:
    env = os.environ if environ is None else environ
    home = os.path.expanduser("~")
    profile = env.get("AWS_PROFILE") or env.get("AWS_DEFAULT_PROFILE") or "default"
    creds = _profile_sections(
        env.get("AWS_SHARED_CREDENTIALS_FILE") or os.path.join(home, ".aws", "credentials"),
        profile, config_file=False)
    conf = _profile_sections(
        env.get("AWS_CONFIG_FILE") or os.path.join(home, ".aws", "config"),
        profile, config_file=True)

    key, secret = env.get("AWS_ACCESS_KEY_ID"), env.get("AWS_SECRET_ACCESS_KEY")
    token = env.get("AWS_SESSION_TOKEN")
    if not (key and secret):
        for section in (creds, conf):
            if section.get("aws_access_key_id") and section.get("aws_secret_access_key"):
                key = section["aws_access_key_id"]
                secret = section["aws_secret_access_key"]
                token = section.get("aws_session_token")
                break
        else:
            key = secret = token = None
    return S3Settings(
        access_key_id=key or None,
        secret_access_key=secret or None,
        session_token=token or None,
        region=(region or env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")
                or conf.get("region") or DEFAULT_REGION),
        endpoint=(endpoint or env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL")
                  or conf.get("endpoint_url") or None),
        metadata_allowed=env.get("AWS_EC2_METADATA_DISABLED", "").strip().lower()
        not in ("1", "true", "yes", "on"),
    )
