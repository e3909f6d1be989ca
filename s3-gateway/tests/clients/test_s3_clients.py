"""Real S3 clients against a running minicluster's gateway.

Run by .ci/run: aws-cli (mb, multipart cp up, ranged parallel cp down, ls,
rm, checksums) and boto3 (every Range rule on GET and HEAD, ListObjectsV2
paging, DeleteObjects, a presigned GET with requests, a wrong secret -> 403,
checksums as trailers and per part, conditional writes), and S3 users made
with `cargo xtask admin user create` (owners, canned ACLs, anonymous reads,
revoked keys).
Reads the gateway address and keys from target/minicluster/cluster.json;
when the cluster runs with --tls (an https endpoint), every client trusts the
CA cluster.json names (AWS_CA_BUNDLE for aws-cli and boto3,
REQUESTS_CA_BUNDLE for requests) and one more check makes sure a client that
does not trust it is refused.
Prints "N passed, M failed" and exits non-zero on any failure.
"""

import filecmp
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import urllib.parse

import boto3
import requests
from botocore import UNSIGNED
from botocore.client import Config
from botocore.exceptions import ClientError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
CLUSTER = json.load(open(os.path.join(ROOT, "target", "minicluster", "cluster.json")))
INFO = CLUSTER["s3"]
ENDPOINT, AK, SK = INFO["endpoint"], INFO["access_key"], INFO["secret_key"]
CA = CLUSTER.get("tls", {}).get("ca") if ENDPOINT.startswith("https://") else None
if CA:
    os.environ["AWS_CA_BUNDLE"] = CA
    os.environ["REQUESTS_CA_BUNDLE"] = CA

passed, failed = 0, 0


def check(name, cond, detail=""):
    global passed, failed
    if cond:
        passed += 1
        print(f"ok   {name}")
    else:
        failed += 1
        print(f"FAIL {name} {detail}")


def client(secret=SK, access=AK, signed=True):
    extra = {} if signed else {"signature_version": UNSIGNED}
    return boto3.client(
        "s3",
        endpoint_url=ENDPOINT,
        aws_access_key_id=access,
        aws_secret_access_key=secret,
        region_name="us-east-1",
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}, **extra),
    )


def aws(*args, keys=(AK, SK)):
    env = dict(os.environ, AWS_ACCESS_KEY_ID=keys[0], AWS_SECRET_ACCESS_KEY=keys[1], AWS_DEFAULT_REGION="us-east-1")
    return subprocess.run(["aws", "--endpoint-url", ENDPOINT, *args], env=env, capture_output=True, text=True)


def xtask(*args):
    """`cargo xtask ARGS` from the workspace root: finds the cluster through cluster.json."""
    return subprocess.run(["cargo", "xtask", *args], cwd=ROOT, capture_output=True, text=True)


def error_of(call):
    """(HTTP status, S3 error code) of a boto3 call expected to fail; (200, "") if it did not."""
    try:
        call()
        return (200, "")
    except ClientError as e:
        return (e.response["ResponseMetadata"]["HTTPStatusCode"], e.response["Error"]["Code"])


def aws_cli():
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "big.bin")
        with open(src, "wb") as f:
            f.write(os.urandom(40 * 1024 * 1024))
        r = aws("s3", "mb", "s3://clitest")
        check("aws s3 mb", r.returncode == 0, r.stderr)
        r = aws("s3", "cp", src, "s3://clitest/dir/big.bin")
        check("aws s3 cp up (multipart)", r.returncode == 0, r.stderr)
        head = client().head_object(Bucket="clitest", Key="dir/big.bin")
        check("multipart ETag form", head["ETag"].strip('"').endswith("-5"), head["ETag"])
        down = os.path.join(d, "down.bin")
        r = aws("s3", "cp", "s3://clitest/dir/big.bin", down)
        check("aws s3 cp down (ranged, parallel)", r.returncode == 0, r.stderr)
        check("downloaded bytes equal", r.returncode == 0 and filecmp.cmp(src, down, shallow=False))
        r = aws("s3", "ls", "s3://clitest/dir/")
        check("aws s3 ls", r.returncode == 0 and "big.bin" in r.stdout, r.stdout + r.stderr)
        r = aws("s3", "rm", "s3://clitest/dir/big.bin")
        check("aws s3 rm", r.returncode == 0, r.stderr)
        r = aws("s3", "ls", "s3://clitest/dir/")
        check("removed", "big.bin" not in r.stdout)


def ranges():
    s3 = client()
    s3.create_bucket(Bucket="boto")
    body = bytes(range(256)) * 4  # 1024 bytes
    s3.put_object(Bucket="boto", Key="obj", Body=body, ContentType="text/x-test", Metadata={"color": "blue"})
    s3.put_object(Bucket="boto", Key="empty", Body=b"")
    size = len(body)
    cases = [
        ("bytes=0-0", 206, body[0:1]),
        ("bytes=10-19", 206, body[10:20]),
        ("bytes=1000-", 206, body[1000:]),
        ("bytes=-24", 206, body[-24:]),
        ("bytes=1000-5000", 206, body[1000:]),
        ("bytes=-5000", 206, body),
        ("bytes=0-99999999999999999999999", 206, body),
        ("bytes=5-2", 200, body),
        ("bytes=a-b", 200, body),
        ("bytes=-", 200, body),
        ("items=0-1", 200, body),
        ("bytes=0-1,3-4", 200, body),
    ]
    for rng, status, want in cases:
        r = s3.get_object(Bucket="boto", Key="obj", Range=rng)
        got = r["Body"].read()
        code = r["ResponseMetadata"]["HTTPStatusCode"]
        ok = code == status and got == want and r["ContentLength"] == len(want)
        if status == 206:
            first = size - len(want) if rng.startswith("bytes=-") else int(rng[6:].split("-")[0])
            ok = ok and r.get("ContentRange") == f"bytes {first}-{first + len(want) - 1}/{size}"
        check(f"GET Range {rng} -> {status}", ok, f"{code} {len(got)} {r.get('ContentRange')}")
        check(f"GET Range {rng} accept-ranges", r.get("AcceptRanges") == "bytes")
    for rng, key in [("bytes=1024-", "obj"), ("bytes=5000-6000", "obj"), ("bytes=-0", "obj"), ("bytes=0-", "empty"), ("bytes=-5", "empty")]:
        try:
            s3.get_object(Bucket="boto", Key=key, Range=rng)
            check(f"GET Range {rng} on {key} -> 416", False, "no error")
        except ClientError as e:
            hdrs = e.response["ResponseMetadata"]["HTTPHeaders"]
            n = 0 if key == "empty" else size
            check(
                f"GET Range {rng} on {key} -> 416",
                e.response["ResponseMetadata"]["HTTPStatusCode"] == 416
                and e.response["Error"]["Code"] == "InvalidRange"
                and hdrs.get("content-range") == f"bytes */{n}",
                str(e.response),
            )
    h = s3.head_object(Bucket="boto", Key="obj", Range="bytes=2-5")
    check("HEAD Range -> 206", h["ResponseMetadata"]["HTTPStatusCode"] == 206 and h["ContentLength"] == 4
          and h["ContentRange"] == f"bytes 2-5/{size}", str(h))
    h = s3.head_object(Bucket="boto", Key="obj")
    check("HEAD metadata", h["ContentType"] == "text/x-test" and h["Metadata"].get("color") == "blue"
          and h["ETag"].strip('"') == hashlib.md5(body).hexdigest(), str(h))
    try:
        s3.get_object(Bucket="boto", Key="obj", IfMatch='"nope"', Range="bytes=0-1")
        check("If-Match failing wins over Range", False, "no error")
    except ClientError as e:
        check("If-Match failing wins over Range", e.response["ResponseMetadata"]["HTTPStatusCode"] == 412)
    try:
        s3.get_object(Bucket="boto", Key="obj", PartNumber=1, Range="bytes=0-1")
        check("Range with partNumber -> 400", False, "no error")
    except ClientError as e:
        check("Range with partNumber -> 400", e.response["ResponseMetadata"]["HTTPStatusCode"] == 400)
    # boto3 has no If-Range parameter: use a presigned URL (it signs only the host).
    v4 = boto3.client("s3", endpoint_url=ENDPOINT, aws_access_key_id=AK, aws_secret_access_key=SK,
                      region_name="us-east-1", config=Config(signature_version="s3v4", s3={"addressing_style": "path"}))
    url = v4.generate_presigned_url("get_object", Params={"Bucket": "boto", "Key": "obj"}, ExpiresIn=300)
    r = requests.get(url, headers={"Range": "bytes=0-9", "If-Range": '"stale-etag"'}, timeout=30)
    check("stale If-Range -> 200 whole", r.status_code == 200 and r.content == body, str(r.status_code))
    etag = s3.head_object(Bucket="boto", Key="obj")["ETag"]
    r = requests.get(url, headers={"Range": "bytes=0-9", "If-Range": etag}, timeout=30)
    check("matching If-Range -> 206", r.status_code == 206 and r.content == body[:10], str(r.status_code))
    r = s3.get_object(Bucket="boto", Key="obj", ResponseContentType="application/x-override")
    check("response-content-type", r["ContentType"] == "application/x-override", r["ContentType"])
    try:
        s3.head_object(Bucket="boto", Key="obj", Range="bytes=5000-")
        check("HEAD Range past end -> 416", False, "no error")
    except ClientError as e:
        check("HEAD Range past end -> 416", e.response["ResponseMetadata"]["HTTPStatusCode"] == 416)
    h = s3.head_object(Bucket="boto", Key="obj", Range="bytes=9-2")
    check("HEAD ignored Range -> 200", h["ResponseMetadata"]["HTTPStatusCode"] == 200 and h["ContentLength"] == size)
    try:
        s3.get_object(Bucket="boto", Key="missing")
        check("NoSuchKey", False)
    except ClientError as e:
        check("NoSuchKey", e.response["Error"]["Code"] == "NoSuchKey")


def listing_and_delete():
    s3 = client()
    s3.create_bucket(Bucket="lists")
    names = [f"a/{i:02d}" for i in range(7)] + ["b/x", "c"]
    odd = "odd key+plus %41 é.txt"  # survives EncodingType=url, which boto3 asks for
    s3.put_object(Bucket="lists", Key=odd, Body=b"odd")
    listed = [o["Key"] for o in s3.list_objects_v2(Bucket="lists").get("Contents", [])]
    check("EncodingType=url keys round-trip", odd in listed, str(listed))
    s3.delete_object(Bucket="lists", Key=odd)
    for n in names:
        s3.put_object(Bucket="lists", Key=n, Body=n.encode())
    seen, token, pages = [], None, 0
    while True:
        kw = {"Bucket": "lists", "MaxKeys": 2}
        if token:
            kw["ContinuationToken"] = token
        r = s3.list_objects_v2(**kw)
        pages += 1
        seen += [o["Key"] for o in r.get("Contents", [])]
        if not r["IsTruncated"]:
            break
        token = r["NextContinuationToken"]
    check("list_objects_v2 paging", seen == sorted(names) and pages == 5, f"{seen} in {pages} pages")
    r = s3.list_objects_v2(Bucket="lists", Delimiter="/")
    check("delimiter", [p["Prefix"] for p in r.get("CommonPrefixes", [])] == ["a/", "b/"]
          and [o["Key"] for o in r.get("Contents", [])] == ["c"], str(r))
    r = s3.delete_objects(Bucket="lists", Delete={"Objects": [{"Key": n} for n in names]})
    check("delete_objects", len(r.get("Deleted", [])) == len(names), str(r))
    check("bucket empty", s3.list_objects_v2(Bucket="lists").get("KeyCount") == 0)


def more_operations():
    s3 = client()
    s3.create_bucket(Bucket="ops")
    check("head_bucket", s3.head_bucket(Bucket="ops")["ResponseMetadata"]["HTTPStatusCode"] == 200)
    check("list_buckets", "ops" in [b["Name"] for b in s3.list_buckets()["Buckets"]])
    s3.put_object(Bucket="ops", Key="src", Body=b"copy me", Metadata={"k": "v"})
    s3.copy_object(Bucket="ops", Key="dst", CopySource={"Bucket": "ops", "Key": "src"})
    got = s3.get_object(Bucket="ops", Key="dst")
    check("copy_object", got["Body"].read() == b"copy me" and got["Metadata"].get("k") == "v", str(got))
    r = s3.list_objects(Bucket="ops", MaxKeys=1)
    check("list_objects v1", [o["Key"] for o in r["Contents"]] == ["dst"] and r["IsTruncated"], str(r))
    r = s3.list_object_versions(Bucket="ops")
    check("list_object_versions", all(v["VersionId"] == "null" and v["IsLatest"] for v in r["Versions"])
          and len(r["Versions"]) == 2, str(r))
    # Multipart by hand: two parts, list, partNumber GET, then an aborted upload.
    part = os.urandom(5 * 1024 * 1024)
    up = s3.create_multipart_upload(Bucket="ops", Key="mpu")["UploadId"]
    e1 = s3.upload_part(Bucket="ops", Key="mpu", UploadId=up, PartNumber=1, Body=part)["ETag"]
    e2 = s3.upload_part(Bucket="ops", Key="mpu", UploadId=up, PartNumber=2, Body=b"tail")["ETag"]
    parts = s3.list_parts(Bucket="ops", Key="mpu", UploadId=up)["Parts"]
    check("list_parts", [(p["PartNumber"], p["Size"]) for p in parts] == [(1, len(part)), (2, 4)], str(parts))
    ups = s3.list_multipart_uploads(Bucket="ops").get("Uploads", [])
    check("list_multipart_uploads", [u["UploadId"] for u in ups] == [up], str(ups))
    try:
        s3.complete_multipart_upload(Bucket="ops", Key="mpu", UploadId=up, MultipartUpload={
            "Parts": [{"PartNumber": 2, "ETag": e2}, {"PartNumber": 1, "ETag": e1}]})
        check("InvalidPartOrder", False, "no error")
    except ClientError as e:
        check("InvalidPartOrder", e.response["Error"]["Code"] == "InvalidPartOrder", str(e.response))
    s3.complete_multipart_upload(Bucket="ops", Key="mpu", UploadId=up, MultipartUpload={
        "Parts": [{"PartNumber": 1, "ETag": e1}, {"PartNumber": 2, "ETag": e2}]})
    whole = s3.get_object(Bucket="ops", Key="mpu")
    check("multipart object", whole["Body"].read() == part + b"tail" and whole["ETag"].strip('"').endswith("-2"))
    p2 = s3.get_object(Bucket="ops", Key="mpu", PartNumber=2)
    check("GET partNumber=2", p2["Body"].read() == b"tail" and p2["ResponseMetadata"]["HTTPStatusCode"] == 206
          and p2.get("PartsCount") == 2, str(p2))
    up2 = s3.create_multipart_upload(Bucket="ops", Key="gone")["UploadId"]
    s3.upload_part(Bucket="ops", Key="gone", UploadId=up2, PartNumber=1, Body=b"x")
    s3.abort_multipart_upload(Bucket="ops", Key="gone", UploadId=up2)
    try:
        s3.list_parts(Bucket="ops", Key="gone", UploadId=up2)
        check("abort_multipart_upload", False, "upload still listed")
    except ClientError as e:
        check("abort_multipart_upload", e.response["Error"]["Code"] == "NoSuchUpload", str(e.response))
    try:
        s3.delete_bucket(Bucket="ops")
        check("BucketNotEmpty", False, "deleted a non-empty bucket")
    except ClientError as e:
        check("BucketNotEmpty", e.response["Error"]["Code"] == "BucketNotEmpty", str(e.response))
    for k in ("src", "dst", "mpu"):
        s3.delete_object(Bucket="ops", Key=k)
    s3.delete_bucket(Bucket="ops")
    check("delete_bucket", "ops" not in [b["Name"] for b in s3.list_buckets()["Buckets"]])
    try:
        s3.get_object(Bucket="nope-bucket", Key="x")
        check("NoSuchBucket", False)
    except ClientError as e:
        check("NoSuchBucket", e.response["Error"]["Code"] == "NoSuchBucket", str(e.response))


def presigned_and_auth():
    for version in ("s3v4", "s3"):  # SigV4 query auth, and boto3's default SigV2
        s3 = boto3.client(
            "s3", endpoint_url=ENDPOINT, aws_access_key_id=AK, aws_secret_access_key=SK,
            region_name="us-east-1", config=Config(signature_version=version, s3={"addressing_style": "path"}),
        )
        url = s3.generate_presigned_url("get_object", Params={"Bucket": "boto", "Key": "obj"}, ExpiresIn=300)
        r = requests.get(url, timeout=30)
        check(f"presigned GET ({version})", r.status_code == 200 and len(r.content) == 1024, f"{r.status_code} {r.text[:200]}")
        r = requests.get(url, headers={"Range": "bytes=0-9"}, timeout=30)
        check(f"presigned ranged GET ({version})", r.status_code == 206 and len(r.content) == 10, f"{r.status_code}")
        parts = urllib.parse.urlsplit(url)
        query = []
        for k, v in urllib.parse.parse_qsl(parts.query):
            if k == "X-Amz-Signature":  # hex: change one digit
                v = ("0" if v[0] != "0" else "1") + v[1:]
            elif k == "Signature":  # base64: change one character
                v = ("A" if v[0] != "A" else "B") + v[1:]
            query.append((k, v))
        bad = urllib.parse.urlunsplit(parts._replace(query=urllib.parse.urlencode(query)))
        r = requests.get(bad, timeout=30)
        check(f"tampered presigned GET ({version}) -> 403", r.status_code == 403, f"{r.status_code}")
    try:
        boto3.client("s3", endpoint_url=ENDPOINT, aws_access_key_id="nobody", aws_secret_access_key=SK,
                     region_name="us-east-1", config=Config(s3={"addressing_style": "path"})).list_buckets()
        check("unknown key -> 403", False, "no error")
    except ClientError as e:
        check("unknown key -> 403", e.response["ResponseMetadata"]["HTTPStatusCode"] == 403
              and e.response["Error"]["Code"] == "InvalidAccessKeyId", str(e.response))
    # A request signed with a clock 15+ minutes off: botocore signs with
    # datetime.datetime.now/utcnow from botocore.auth, which we skew.
    import datetime
    import botocore.auth

    real = botocore.auth.datetime.datetime

    class Skewed(real):
        @classmethod
        def utcnow(cls):
            return real.utcnow() - datetime.timedelta(hours=2)

        @classmethod
        def now(cls, tz=None):
            return real.now(tz) - datetime.timedelta(hours=2)

    botocore.auth.datetime.datetime = Skewed
    try:
        client().list_buckets()
        check("skewed date -> 403", False, "no error")
    except ClientError as e:
        check("skewed date -> 403", e.response["ResponseMetadata"]["HTTPStatusCode"] == 403
              and e.response["Error"]["Code"] == "RequestTimeTooSkewed", str(e.response))
    finally:
        botocore.auth.datetime.datetime = real
    try:
        client(secret="wrong-secret").list_buckets()
        check("wrong secret -> 403", False, "no error")
    except ClientError as e:
        check("wrong secret -> 403", e.response["ResponseMetadata"]["HTTPStatusCode"] == 403
              and e.response["Error"]["Code"] == "SignatureDoesNotMatch", str(e.response))


def integrity_and_conditions():
    s3 = client()
    s3.create_bucket(Bucket="integ")
    with tempfile.TemporaryDirectory() as d:
        hello = os.path.join(d, "hello.txt")
        with open(hello, "wb") as f:
            f.write(b"hello\n")
        # The example: the real CRC32 of "hello\n" is NjowIA==.
        r = aws("s3api", "put-object", "--bucket", "integ", "--key", "k", "--body", hello, "--checksum-crc32", "AAAAAA==")
        check("aws put-object wrong --checksum-crc32 -> BadDigest", r.returncode != 0 and "BadDigest" in r.stderr, r.stderr)
        r = aws("s3api", "head-object", "--bucket", "integ", "--key", "k")
        check("nothing stored after BadDigest", r.returncode != 0, r.stdout)
        r = aws("s3api", "put-object", "--bucket", "integ", "--key", "k", "--body", hello, "--checksum-crc32", "NjowIA==")
        check("aws put-object right --checksum-crc32", r.returncode == 0, r.stderr)
    # boto3 sends CRC32 in an aws-chunked trailer by default; the gateway verifies and returns it.
    s3.put_object(Bucket="integ", Key="b", Body=b"x" * 100_000, ChecksumAlgorithm="SHA256")
    got = s3.get_object(Bucket="integ", Key="b", ChecksumMode="ENABLED")
    got["Body"].read()
    check("boto3 SHA256 round trip", "ChecksumSHA256" in got, str({k: v for k, v in got.items() if k.startswith("Checksum")}))
    head = s3.head_object(Bucket="integ", Key="k", ChecksumMode="ENABLED")
    check("head-object returns the stored CRC32", head.get("ChecksumCRC32") == "NjowIA==", str(head))
    # Conditional writes.
    s3.put_object(Bucket="integ", Key="once", Body=b"1", IfNoneMatch="*")
    try:
        s3.put_object(Bucket="integ", Key="once", Body=b"2", IfNoneMatch="*")
        check("If-None-Match: * on an existing key -> 412", False, "no error")
    except ClientError as e:
        check("If-None-Match: * on an existing key -> 412",
              e.response["ResponseMetadata"]["HTTPStatusCode"] == 412, str(e.response))
    etag = s3.head_object(Bucket="integ", Key="once")["ETag"]
    s3.put_object(Bucket="integ", Key="once", Body=b"3", IfMatch=etag)
    check("If-Match with the current ETag writes", s3.get_object(Bucket="integ", Key="once")["Body"].read() == b"3")
    try:
        s3.put_object(Bucket="integ", Key="once", Body=b"4", IfMatch=etag)
        check("If-Match with an old ETag -> 412", False, "no error")
    except ClientError as e:
        check("If-Match with an old ETag -> 412", e.response["ResponseMetadata"]["HTTPStatusCode"] == 412, str(e.response))
    # A multipart upload with a full-object CRC32 checksum (aws-cli / SDK style).
    up = s3.create_multipart_upload(Bucket="integ", Key="mp", ChecksumAlgorithm="CRC32", ChecksumType="FULL_OBJECT")
    p1 = os.urandom(5 * 1024 * 1024)
    p2 = b"tail"
    parts = []
    for n, body in ((1, p1), (2, p2)):
        r = s3.upload_part(Bucket="integ", Key="mp", UploadId=up["UploadId"], PartNumber=n, Body=body, ChecksumAlgorithm="CRC32")
        parts.append({"PartNumber": n, "ETag": r["ETag"], "ChecksumCRC32": r["ChecksumCRC32"]})
    done = s3.complete_multipart_upload(Bucket="integ", Key="mp", UploadId=up["UploadId"], MultipartUpload={"Parts": parts})
    import zlib
    import base64
    want = base64.b64encode(zlib.crc32(p1 + p2).to_bytes(4, "big")).decode()
    check("multipart full-object CRC32", done.get("ChecksumCRC32") == want, f"{done.get('ChecksumCRC32')} != {want}")


def users_and_acls():
    """S3 users from `cargo xtask admin user create`: another user's private bucket and
    object are 403 AccessDenied; canned ACLs (public-read, authenticated-read) open reads
    to others and to anonymous requests; a revoked key is refused."""
    def create(name):
        r = xtask("admin", "user", "create", name, "--json")
        check(f"cargo xtask admin user create {name} --json", r.returncode == 0, r.stderr)
        u = json.loads(r.stdout)
        check("the new key pair as JSON", set(u) == {"user", "access_key", "secret_key"} and u["user"] == name, u)
        return u

    a, b = create("py-alice"), create("py-bob")
    ca = client(access=a["access_key"], secret=a["secret_key"])
    cb = client(access=b["access_key"], secret=b["secret_key"])
    anon = client(signed=False)
    ca.create_bucket(Bucket="py-alice")
    ca.put_object(Bucket="py-alice", Key="private", Body=b"p")
    ca.put_object(Bucket="py-alice", Key="public", Body=b"open", ACL="public-read")
    ca.put_object(Bucket="py-alice", Key="members", Body=b"m", ACL="authenticated-read")
    forbidden = (403, "AccessDenied")
    check("B: GET of A's private object is 403", error_of(lambda: cb.get_object(Bucket="py-alice", Key="private")) == forbidden)
    check("B: listing A's private bucket is 403", error_of(lambda: cb.list_objects_v2(Bucket="py-alice")) == forbidden)
    check("B: PUT into A's bucket is 403", error_of(lambda: cb.put_object(Bucket="py-alice", Key="b", Body=b"x")) == forbidden)
    check("B: A's bucket ACL is 403", error_of(lambda: cb.get_bucket_acl(Bucket="py-alice")) == forbidden)
    got = cb.get_object(Bucket="py-alice", Key="public")["Body"].read()
    check("B: GET of a public-read object", got == b"open", got)
    check("B: GET of an authenticated-read object", cb.get_object(Bucket="py-alice", Key="members")["Body"].read() == b"m")
    check("anonymous: GET of a public-read object", anon.get_object(Bucket="py-alice", Key="public")["Body"].read() == b"open")
    check("anonymous: GET of a private object is 403", error_of(lambda: anon.get_object(Bucket="py-alice", Key="private")) == forbidden)
    check("anonymous: GET of an authenticated-read object is 403", error_of(lambda: anon.get_object(Bucket="py-alice", Key="members")) == forbidden)
    r = requests.get(f"{ENDPOINT}/py-alice/public", timeout=10)
    check("anonymous plain HTTP GET of a public-read object", r.status_code == 200 and r.content == b"open", r.status_code)
    check("anonymous: ListBuckets is 403", error_of(lambda: anon.list_buckets()) == forbidden)
    names = [x["Name"] for x in cb.list_buckets()["Buckets"]]
    check("B's ListBuckets does not show A's bucket", "py-alice" not in names, names)

    ca.put_bucket_acl(Bucket="py-alice", ACL="public-read")
    grants = ca.get_bucket_acl(Bucket="py-alice")["Grants"]
    check("GetBucketAcl shows the AllUsers READ grant",
          any(g["Grantee"].get("URI", "").endswith("/AllUsers") and g["Permission"] == "READ" for g in grants), grants)
    keys = [o["Key"] for o in cb.list_objects_v2(Bucket="py-alice").get("Contents", [])]
    check("B lists a public-read bucket (200)", "private" in keys, keys)
    check("a public-read bucket leaves its private objects 403",
          error_of(lambda: cb.get_object(Bucket="py-alice", Key="private")) == forbidden)
    r = aws("s3api", "put-object-acl", "--bucket", "py-alice", "--key", "private", "--acl", "public-read",
            keys=(a["access_key"], a["secret_key"]))
    check("aws s3api put-object-acl as the owner", r.returncode == 0, r.stderr)
    check("B: GET after PutObjectAcl public-read", cb.get_object(Bucket="py-alice", Key="private")["Body"].read() == b"p")
    r = aws("s3api", "put-object-acl", "--bucket", "py-alice", "--key", "private", "--acl", "public-read",
            keys=(b["access_key"], b["secret_key"]))
    check("aws s3api put-object-acl as another user is refused", r.returncode != 0 and "AccessDenied" in r.stderr, r.stderr)
    check("PutObjectAcl public-read-write is 501",
          error_of(lambda: ca.put_object_acl(Bucket="py-alice", Key="private", ACL="public-read-write")) == (501, "NotImplemented"))

    r = xtask("admin", "user", "list", "--json")
    users = {u["user"]: u["access_keys"] for u in json.loads(r.stdout)} if r.returncode == 0 else {}
    check("cargo xtask admin user list --json", users.get("py-bob") == [b["access_key"]], r.stdout + r.stderr)
    r = xtask("admin", "user", "revoke-key", b["access_key"])
    check("cargo xtask admin user revoke-key", r.returncode == 0, r.stderr)
    check("a revoked key is 403 InvalidAccessKeyId", error_of(lambda: cb.list_buckets()) == (403, "InvalidAccessKeyId"))
    check("the administrator's key pair still works", any(x["Name"] == "py-alice" for x in client().list_buckets()["Buckets"]))


def https_trust():
    """Over HTTPS: the CA-trusting client above worked; one that trusts only the
    system roots is refused at the handshake, and plain HTTP gets no S3 answer."""
    if not CA:
        return
    try:
        import certifi  # requests' own dependency: the public roots, not the cluster CA

        requests.get(ENDPOINT, verify=certifi.where(), timeout=10)
        check("a client without the cluster CA is refused", False, "the handshake succeeded")
    except requests.exceptions.SSLError:
        check("a client without the cluster CA is refused", True)
    try:
        r = requests.get("http://" + ENDPOINT[len("https://"):], timeout=10)
        check("plain HTTP to the HTTPS port gets no S3 answer", "x-amz-request-id" not in r.headers, r.headers)
    except requests.exceptions.RequestException:
        check("plain HTTP to the HTTPS port gets no S3 answer", True)


for step in (aws_cli, ranges, listing_and_delete, more_operations, presigned_and_auth, integrity_and_conditions, users_and_acls, https_trust):
    try:
        step()
    except Exception as e:  # a crash in one step is a failure, not the end of the run
        # An S3 error's headers say who answered (the gateway sends x-amz-request-id, which
        # its log names) even when, as for HEAD, there is no body.
        headers = getattr(e, "response", {}).get("ResponseMetadata", {}).get("HTTPHeaders")
        check(f"{step.__name__} ran", False, f"{e!r} headers={headers}")

print(f"s3: {passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
