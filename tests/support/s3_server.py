"""moto's standalone S3 server for the object-storage tests, started by
``scripts/s3-server.sh``: ``python -m tests.support.s3_server PORT`` (loopback only).

It is moto's own server (``moto_server``: ``DomainDispatcherApplication`` under werkzeug's
``run_simple``) with one fix in front: moto 5.2 answers CompleteMultipartUpload with a
``<CompleteMultipartUploadResponse>`` document where S3 (and the AWS C++ SDK that
pyarrow's S3 filesystem is built on) has ``<CompleteMultipartUploadResult>``; the SDK takes
the unknown root for an error embedded in a 200 answer and retries until it gives up, so no
upload of pyarrow's ever completes. The fix renames that one root element.
"""
import sys

from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
from werkzeug.serving import run_simple

WRONG, RIGHT = b"CompleteMultipartUploadResponse", b"CompleteMultipartUploadResult"


def fix_complete_multipart(app):
    def wrapped(environ, start_response):
        if environ.get("REQUEST_METHOD") != "POST" or "uploadId=" not in environ.get(
                "QUERY_STRING", ""):
            return app(environ, start_response)
        held = {}

        def hold(status, headers, exc_info=None):
            held["status"], held["headers"] = status, headers
            return lambda _data: None

        body = b"".join(app(environ, hold)).replace(WRONG, RIGHT)
        headers = [(k, str(len(body)) if k.lower() == "content-length" else v)
                   for k, v in held["headers"]]
        start_response(held["status"], headers)
        return [body]
    return wrapped


def main(port: int) -> None:
    app = fix_complete_multipart(DomainDispatcherApplication(create_backend_app))
    run_simple("127.0.0.1", port, app, threaded=True, use_reloader=False)


if __name__ == "__main__":
    main(int(sys.argv[1]))
