"""Evidence benchmark: log appends, Merkle root and full verification of a large log, signing.

    .venv/bin/python bench/evidence.py [--records 1000000] [--durable 2000] [--fast 100000]

Prints wall and CPU seconds (the CPU figure is what this process used; on a shared 2-core host
the wall figure includes time other processes took). Files go to a temp directory that is removed.

The 1,000,000-record log is written from one real JCS record with the ``seq`` varied, so every
line has the size and shape of a real record (about 530 bytes: one series, horizon 6, mean and two
quantiles) without spending minutes in the pure-Python JCS encoder; append throughput, which does
run the encoder, is measured separately.
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from app.evidence.checkpoint import Checkpoint, open_checkpoint, sign_checkpoint
from app.evidence.jcs import canonical_bytes
from app.evidence.keys import KeyRing, SigningKey
from app.evidence.prediction_log import PredictionLog, root_of_file
from app.evidence.report import (
    ArchivedObject,
    BenchmarkPredicate,
    ContainerRecord,
    ImageSubject,
    SandboxSummary,
    sign_report,
)
from app.evidence.verify import DirectoryArchive, verify_report

T = TypeVar("T")
RUN_ID = "0b6c7a52-0000-4000-8000-000000000001"
REPOSITORY = "127.0.0.1:5000/acme/model"
MANIFEST = "sha256:" + hashlib.sha256(b"manifest").hexdigest()


def timed(fn: Callable[[], T]) -> tuple[T, float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    result = fn()
    return result, time.perf_counter() - wall, time.process_time() - cpu


def record(seq: int) -> dict[str, Any]:
    request_id = f"req-{seq:07d}"
    return {
        "run_id": RUN_ID, "seq": seq, "task_id": "m4-hourly", "window_id": f"w{seq:07d}",
        "request_id": request_id, "platform_issued_at": "2026-11-30T12:00:00.123456Z",
        "runtime_ms": 3.25, "memory_mb": 41.5, "status": "ok",
        "request_sha256": hashlib.sha256(request_id.encode()).hexdigest(),
        "answer": {"type": "prediction", "request_id": request_id, "forecasts": [{
            "item_id": "H1", "mean": [100.125 + h for h in range(6)],
            "quantiles": {"0.1": [90.5] * 6, "0.9": [110.25] * 6}}]},
    }


def bench_appends(directory: Path, count: int, durable: bool) -> None:
    records = [record(i) for i in range(count)]
    path = directory / f"append-{'durable' if durable else 'fast'}.jsonl"

    def run() -> None:
        with PredictionLog.create(path, durable=durable) as log:
            for r in records:
                log.append(r)

    _, wall, cpu = timed(run)
    kind = "with fsync per record" if durable else "without fsync        "
    print(f"append {kind}: {count:>9,} records  {count / wall:>10,.0f} rec/s  "
          f"{wall / count * 1e6:>8.1f} us/rec wall  {cpu / count * 1e6:>6.1f} us/rec CPU")


def write_large_log(path: Path, count: int) -> None:
    head, tail = canonical_bytes(record(0)).split(b'"seq":0', 1)
    with path.open("wb") as handle:
        batch: list[bytes] = []
        for seq in range(count):
            batch.append(b'%s"seq":%d%s\n' % (head, seq, tail))
            if len(batch) == 10_000:
                handle.write(b"".join(batch))
                batch.clear()
        handle.write(b"".join(batch))


def keys() -> tuple[SigningKey, SigningKey]:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    return (SigningKey("report", Ed25519PrivateKey.generate(), start),
            SigningKey("log", Ed25519PrivateKey.generate(), start))


def archive_run(directory: Path, report_key: SigningKey, log_key: SigningKey,
                signed_at: datetime) -> bytes:
    """Checkpoint, archive objects and a signed report for the log at directory/predictions."""
    return sign_report(**prepare_report(directory, report_key, log_key, signed_at)).envelope_bytes


def prepare_report(directory: Path, report_key: SigningKey, log_key: SigningKey,
                   signed_at: datetime) -> dict[str, Any]:
    """Write the checkpoint and archive objects; return the arguments of ``sign_report``."""
    tree = root_of_file(directory / "predictions.jsonl")
    note = sign_checkpoint(Checkpoint(f"future-ts.bench/run/{RUN_ID}", tree.size, tree.root),
                           log_key)
    objects = {
        "checkpoint": note.encode(),
        "run_manifest.json": canonical_bytes({"run_id": RUN_ID}),
        "container.json": ContainerRecord(image_ref=REPOSITORY + ":v1", repository=REPOSITORY,
                                          manifest_digest=MANIFEST).to_json_bytes(),
        "stderr.log": b"ready\n",
    }
    for name, data in objects.items():
        (directory / name).write_bytes(data)
    digests = {name: hashlib.sha256((directory / name).read_bytes()).hexdigest()
               for name in [*objects, "predictions.jsonl"]}
    predicate = BenchmarkPredicate(
        submission_id="sub", run_id=RUN_ID, tier="public_dev", execution_mode="sealed",
        operational_level="hosted_sealed", platform_received_at=signed_at - timedelta(hours=1),
        platform_issued_at_first=signed_at - timedelta(minutes=50),
        platform_issued_at_last=signed_at - timedelta(minutes=1), hardware_class="cpu-1c-1g",
        host_cpu_model="bench", sandbox=SandboxSummary("podman", {"cpus": 1}, MANIFEST),
        seed=1, image_ref=REPOSITORY + ":v1", checkpoint=note, checkpoint_signed_at=signed_at,
        metrics={"m4-hourly": {"mase": {"mean": 0.9, "std": 0.01, "n": 3}}},
        latency_ms={"m4-hourly": {"p50": 3.0, "p95": 5.0, "p99": 8.0}}, memory_peak_mb=41.5,
        capability_vector={"accuracy": 0.5}, archive_uri=f"file:///bench/runs/{RUN_ID}/",
        archive_objects={n: ArchivedObject(d, (directory / n).stat().st_size)
                         for n, d in digests.items()},
        harness_version="bench", scorer_version="bench",
    )
    return {"image": ImageSubject(REPOSITORY, MANIFEST),
            "predictions_sha256": digests["predictions.jsonl"],
            "run_manifest_sha256": digests["run_manifest.json"], "predicate": predicate,
            "signer": report_key, "signed_at": signed_at}


def bench_large(directory: Path, count: int) -> None:
    path = directory / "predictions.jsonl"
    _, wall, _ = timed(lambda: write_large_log(path, count))
    print(f"\n{count:,}-record log: {path.stat().st_size / 1e6:,.0f} MB written in {wall:.2f} s")
    tree, wall, cpu = timed(lambda: root_of_file(path))
    print(f"Merkle root from file (root_of_file):            {wall:6.2f} s wall  {cpu:6.2f} s CPU")
    report_key, log_key = keys()
    note = sign_checkpoint(Checkpoint("future-ts.bench/run/x", tree.size, tree.root), log_key)

    def verify_log() -> None:
        head = root_of_file(path)
        checkpoint, _ = open_checkpoint(note, [log_key.public_key])
        assert (checkpoint.size, checkpoint.root) == (head.size, head.root)

    _, wall, cpu = timed(verify_log)
    print(f"full log verification (root + checkpoint):       {wall:6.2f} s wall  {cpu:6.2f} s CPU"
          f"   target <= 3 s")
    signed_at = datetime.now(UTC) - timedelta(seconds=5)
    envelope = archive_run(directory, report_key, log_key, signed_at)
    jwks = KeyRing([report_key, log_key]).jwks()
    result, wall, cpu = timed(lambda: verify_report(envelope, DirectoryArchive(directory), jwks))
    assert result.ok, result.failure
    print(f"verify_report end to end (read, digests, root):  {wall:6.2f} s wall  {cpu:6.2f} s CPU")

    def resume() -> int:
        with PredictionLog.open(path, durable=False) as log:
            return log.size

    size, wall, cpu = timed(resume)
    print(f"PredictionLog.open resume ({size:,} lines rehashed): "
          f"{wall:6.2f} s wall  {cpu:6.2f} s CPU")


def median_ms(fn: Callable[[], object], repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1e3


def bench_report(directory: Path) -> None:
    with PredictionLog.create(directory / "predictions.jsonl", durable=False) as log:
        for seq in range(100):
            log.append(record(seq))
    report_key, log_key = keys()
    signed_at = datetime.now(UTC) - timedelta(seconds=5)
    envelope = archive_run(directory, report_key, log_key, signed_at)
    jwks = KeyRing([report_key, log_key]).jwks()
    arguments = prepare_report(directory, report_key, log_key, signed_at)
    sign = median_ms(lambda: sign_report(**arguments), 200)
    close = median_ms(lambda: archive_run(directory, report_key, log_key, signed_at), 50)
    verify = median_ms(lambda: verify_report(envelope, DirectoryArchive(directory), jwks), 200)
    print(f"\nreport signing (sign_report: statement, JCS, DSSE Ed25519):          {sign:6.2f} ms")
    print(f"closing a 100-record run (root, checkpoint, objects, sign_report):  {close:6.2f} ms")
    print(f"report verification (verify_report, all checks, 100-record run):   {verify:6.2f} ms")
    print(f"signed envelope size: {len(envelope):,} bytes")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--durable", type=int, default=2_000, help="appends with fsync")
    parser.add_argument("--fast", type=int, default=100_000, help="appends without fsync")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="future-ts-bench-") as tmp:
        root = Path(tmp)
        print(f"record size: {len(canonical_bytes(record(0)))} bytes (JCS)")
        bench_appends(root, args.fast, durable=False)
        bench_appends(root, args.durable, durable=True)
        (root / "large").mkdir()
        bench_large(root / "large", args.records)
        (root / "report").mkdir()
        bench_report(root / "report")
    return 0


if __name__ == "__main__":
    sys.exit(main())
