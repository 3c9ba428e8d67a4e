"""Object storage: uploading a checkpoint to S3 the way a run publishes it
(:meth:`hpctrain.storage.object.ObjectStorage.publish`: the files, then the commit record
last, then the staging removed) against ``pyarrow.fs.copy_files`` of the same files to the
same server (one call, pyarrow's own thread pool). Side by side, alternating, medians over repeats.
Target: hpctrain's throughput ≥ 0.9× copy_files'.

The server is moto's (``scripts/s3-server.sh start``, loopback; its objects live in its
memory), or any S3 endpoint in ``$AWS_ENDPOINT_URL`` with credentials in the environment.

    python bench/bench_storage.py [--files 8] [--mib 64] [--repeats 3] [--bucket NAME]
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--files", type=int, default=8, help="files in the checkpoint")
    ap.add_argument("--mib", type=int, default=64, help="the checkpoint's total size, MiB")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--bucket", default=None, help="an existing bucket (default: a new one)")
    args = ap.parse_args()

    if "AWS_ENDPOINT_URL" not in os.environ:  # the test server
        subprocess.run(["bash", os.path.join(ROOT, "scripts", "s3-server.sh"), "start"],
                       check=True)
        os.environ.update(AWS_ENDPOINT_URL="http://127.0.0.1:17481", AWS_ACCESS_KEY_ID="bench",
                          AWS_SECRET_ACCESS_KEY="bench", AWS_DEFAULT_REGION="us-east-1")
    import pyarrow.fs as pafs

    from hpctrain.storage.object import ObjectStorage, split_uri

    bucket = args.bucket or f"bench-{uuid.uuid4().hex[:10]}"
    if args.bucket is None:
        pafs.FileSystem.from_uri("s3://x?allow_bucket_creation=true")[0].create_dir(bucket)
    fs, _ = split_uri(f"s3://{bucket}")
    storage = ObjectStorage()
    work = tempfile.mkdtemp(prefix="hpctrain-bench-storage-")
    src = os.path.join(work, "ckpt")
    os.makedirs(src)
    size = args.mib * (1 << 20) // args.files
    for i in range(args.files):
        with open(os.path.join(src, f"shard-{i}.bin"), "wb") as f:
            f.write(os.urandom(size))
    total = size * args.files
    times = {"hpctrain publish": [], "pyarrow copy_files": []}
    try:
        for r in range(args.repeats):
            order = list(times) if r % 2 == 0 else list(reversed(times))
            for way in order:
                dest = f"{bucket}/r{r}/{way.split()[0]}"
                if way == "hpctrain publish":
                    staged = os.path.join(work, f"staged-{r}")
                    shutil.copytree(src, staged)  # publish consumes its staging directory
                    t0 = time.perf_counter()
                    storage.publish(staged, f"s3://{dest}", ".hpctrain_checkpoint.json", b"{}",
                                    sync=True, mode=0o600)
                else:
                    t0 = time.perf_counter()
                    pafs.copy_files(src, dest, source_filesystem=pafs.LocalFileSystem(),
                                    destination_filesystem=fs)
                times[way].append(time.perf_counter() - t0)
                fs.delete_dir(dest)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    mibs = {w: total / (1 << 20) / statistics.median(t) for w, t in times.items()}
    print(f"checkpoint: {args.files} files, {total / (1 << 20):.0f} MiB; "
          f"{args.repeats} repeats, medians; endpoint {os.environ['AWS_ENDPOINT_URL']}")
    for way, t in times.items():
        print(f"  {way:20s} {statistics.median(t):7.3f} s   {mibs[way]:8.1f} MiB/s   "
              f"(each: {', '.join(f'{x:.3f}' for x in t)})")
    ratio = mibs["hpctrain publish"] / mibs["pyarrow copy_files"]
    print(f"  ratio hpctrain / copy_files: {ratio:.2f}x (target >= 0.9x: "
          f"{'met' if ratio >= 0.9 else 'NOT met'})")
    print(f"  load: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} "
          f"{os.getloadavg()[2]:.2f} on {os.cpu_count()} CPUs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
