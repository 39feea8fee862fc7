"""The SeaweedFS fixture itself: real auth, per-test buckets, kill -9 and restart keep data."""

from __future__ import annotations

import os

from seaweed import ACCESS_KEY, Bucket, RawS3, SeaweedServer


def test_bucket_round_trips_an_object_and_lists_it(s3_bucket: Bucket) -> None:
    s3_bucket.raw.put_object(s3_bucket.name, "a/b", b"hello")
    assert s3_bucket.raw.get_object(s3_bucket.name, "a/b") == b"hello"
    assert s3_bucket.keys("a/") == ["a/b"]
    assert os.environ["AWS_ENDPOINT_URL"] == s3_bucket.endpoint


def test_wrong_secret_and_unknown_key_are_refused(s3_bucket: Bucket) -> None:
    port = s3_bucket.server.s3_port
    wrong_secret = RawS3(port, ACCESS_KEY, "not-the-secret")
    assert wrong_secret.request("GET", s3_bucket.name).status == 403
    unknown_key = RawS3(port, "nobody", "whatever")
    assert unknown_key.request("GET", s3_bucket.name).status == 403


def test_conditional_put_refuses_an_existing_key(s3_bucket: Bucket) -> None:
    raw = s3_bucket.raw
    first = raw.request("PUT", s3_bucket.name, "k", body=b"1", headers={"If-None-Match": "*"})
    assert first.status == 200
    again = raw.request("PUT", s3_bucket.name, "k", body=b"2", headers={"If-None-Match": "*"})
    assert again.status == 412
    stale = raw.request("PUT", s3_bucket.name, "k", body=b"3", headers={"If-Match": '"0"'})
    assert stale.status == 412
    fresh = raw.request("PUT", s3_bucket.name, "k", body=b"4",
                        headers={"If-Match": first.headers["etag"]})
    assert fresh.status == 200
    assert raw.get_object(s3_bucket.name, "k") == b"4"


def test_killed_server_restarts_on_its_directory_with_its_data(seaweed_own: SeaweedServer) -> None:
    raw = seaweed_own.raw
    raw.create_bucket("kept-bucket")
    raw.put_object("kept-bucket", "k", b"survives")
    port = seaweed_own.s3_port
    seaweed_own.kill()
    assert not seaweed_own.alive()
    seaweed_own.start()
    assert seaweed_own.s3_port == port
    assert raw.get_object("kept-bucket", "k") == b"survives"
