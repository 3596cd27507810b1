"""Benchmark: staging an 80 MB adapter against the floor of one copy of the bytes.

One run, side by side (best of three each): a plain copy of the bytes on the local disk; a plain
GET of them from the played Hugging Face Hub (``pulumi_lora.testing.hub``) and from moto's S3
server on loopback; the stager's core (``_staging._fetch.stage``: fetch with ``huggingface_hub``
or ``boto3``, verify every digest, fsync, rename) from each; and staging again when the directory
is already there (verify only, nothing fetched).

Run: ``.venv/bin/python benchmarks/staging_floor.py`` (the ``staging`` and ``test`` extras;
about 10 s).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import boto3
import httpx2

from pulumi_lora._staging._fetch import stage
from pulumi_lora._staging._source import parse_source
from pulumi_lora.testing.hub import PlayedHub
from pulumi_lora.testing.s3 import MotoServer

SIZE = 80 * 10**6
WEIGHTS = "adapter_model.safetensors"
S3_KEYS = {
    "AWS_ACCESS_KEY_ID": "bench",
    "AWS_SECRET_ACCESS_KEY": "bench",
    "AWS_REGION": "us-east-1",
}


def best(run: Callable[[int], object], times: int = 3) -> float:
    """The fastest of ``times`` runs, in seconds."""
    seconds = []
    for attempt in range(times):
        started = time.perf_counter()
        run(attempt)
        seconds.append(time.perf_counter() - started)
    return min(seconds)


def report(what: str, seconds: float) -> None:
    print(f"{what:<64} {seconds:7.3f} s")


def fsync(path: Path) -> None:
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def main() -> None:
    weights = os.urandom(SIZE)
    config = json.dumps({"peft_type": "LORA", "r": 16, "target_modules": ["q_proj", "v_proj"]})
    files = {"adapter_config.json": config.encode(), WEIGHTS: weights}
    digests = {name: hashlib.sha256(data).hexdigest() for name, data in files.items()}
    work = Path(tempfile.mkdtemp(prefix="staging-bench-"))
    source = work / "source.bin"
    source.write_bytes(weights)

    def copy(attempt: int) -> None:
        target = work / f"copy{attempt}.bin"
        shutil.copyfile(source, target)
        fsync(target)

    report("plain copy of the bytes (copyfile + fsync)", best(copy))
    report("sha256 of the bytes in memory", best(lambda _: hashlib.sha256(weights).hexdigest()))

    with PlayedHub() as hub:
        commit = hub.publish("acme/big", files, lfs=frozenset({WEIGHTS}))
        cdn = f"{hub.endpoint}/cdn/{digests[WEIGHTS]}"

        def get(_attempt: int) -> None:
            with httpx2.stream("GET", cdn) as answer, (work / "get.bin").open("wb") as out:
                for chunk in answer.iter_bytes(1 << 20):
                    out.write(chunk)

        report("plain httpx2 GET from the played Hub to disk", best(get))
        request = parse_source(f"hf://acme/big@{commit}", digests=digests)
        env = {"HF_ENDPOINT": hub.endpoint}
        report(
            "stage from the played Hub (fetch, verify, fsync, rename)",
            best(lambda attempt: stage(request, work / f"hf{attempt}", env=env)),
        )
        report(
            "stage again (already staged: verify only)",
            best(lambda _: stage(request, work / "hf0", env=env)),
        )

    moto = MotoServer().start()
    endpoint = moto.endpoint
    try:
        client = boto3.client(
            "s3",
            endpoint_url=endpoint,
            aws_access_key_id=S3_KEYS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=S3_KEYS["AWS_SECRET_ACCESS_KEY"],
            region_name="us-east-1",
        )
        client.create_bucket(Bucket="adapters")
        for name, data in files.items():
            client.put_object(Bucket="adapters", Key=f"big/{name}", Body=data)

        def s3_get(_attempt: int) -> None:
            body = client.get_object(Bucket="adapters", Key=f"big/{WEIGHTS}")["Body"]
            with (work / "s3.bin").open("wb") as out:
                for chunk in body.iter_chunks(1 << 20):
                    out.write(chunk)

        report("plain boto3 get_object from moto to disk", best(s3_get))
        request = parse_source("s3://adapters/big/", digests=digests, s3_endpoint=endpoint)
        report(
            "stage from moto (fetch, verify, fsync, rename)",
            best(lambda attempt: stage(request, work / f"s3{attempt}", env=S3_KEYS)),
        )
    finally:
        moto.stop()
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
