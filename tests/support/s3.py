"""The S3 tests' server and buckets: moto's server started by ``scripts/s3-server.sh``
(scripts/test.sh starts it beside the clusters), a fresh bucket per test.

``s3_bucket`` (a fixture; import it into a test module): starts the server if it is not
answering (skips when moto is not installed), puts the credentials and the endpoint in the
environment the usual way (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``,
``AWS_ENDPOINT_URL``, ``AWS_DEFAULT_REGION``: the runs' workers inherit them), points the
control root of runs on an object store (``HPCTRAIN_CONTROL_ROOT``) into the test's
``tmp_path``, and yields ``s3://<fresh bucket>``.
"""
import os
import subprocess
import uuid

import pytest

from helpers import ROOT

PORT = int(os.environ.get("HPCTRAIN_S3_PORT", "17481"))
ENDPOINT = f"http://127.0.0.1:{PORT}"
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
               "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": ENDPOINT}


@pytest.fixture(scope="session")
def s3_server():
    p = subprocess.run(["bash", os.path.join(ROOT, "scripts", "s3-server.sh"), "start"],
                       capture_output=True, text=True, timeout=60)
    if p.returncode != 0 or "answering" not in p.stdout:
        pytest.skip(reason=f"no S3 server (scripts/s3-server.sh start: {p.stdout}{p.stderr})")
    return ENDPOINT


@pytest.fixture
def s3_bucket(s3_server, monkeypatch, tmp_path):
    import pyarrow.fs as pafs

    for key, value in CREDENTIALS.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    monkeypatch.setenv("HPCTRAIN_CONTROL_ROOT", str(tmp_path / "control"))
    bucket = f"hpct-{uuid.uuid4().hex[:12]}"
    fs = pafs.FileSystem.from_uri("s3://x?allow_bucket_creation=true")[0]
    fs.create_dir(bucket)
    yield f"s3://{bucket}"
