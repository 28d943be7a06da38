"""The container cluster end to end (run by scripts/compose-demo, which builds the image).

Brings deploy/compose.yaml up with fresh certificates, submits over HTTPS, measures failover
from an HTTP client by killing the primary's container (and, with --partitions, by cutting it
off the network: a partition in the kernel), checks that no acknowledged job was lost, and
always tears the cluster down. Prints a JSON summary as its last line."""

import argparse
import http.client
import json
import os
import shutil
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid

PEERS = "c1=c1:7101,c2=c2:7101,c3=c3:7101"
COMPOSE_FILE = "deploy/compose.yaml"


def log(msg):
    print(f"compose-demo: {msg}", file=sys.stderr, flush=True)


def compose_cmd():
    if subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0:
        return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    raise SystemExit("compose-demo: neither `docker compose` nor docker-compose is installed")


class Cluster:
    def __init__(self, project, certs, port):
        self.project, self.certs, self.port = project, certs, port
        self.compose = compose_cmd() + ["-f", COMPOSE_FILE, "-p", project]
        self.env = dict(os.environ, XCE_TLS_DIR=certs, XCE_API_PORT=str(port))
        self.ctx = ssl.create_default_context(cafile=os.path.join(certs, "ca.pem"))
        self.token = None

    def run(self, *args, check=True):
        return subprocess.run(self.compose + list(args), env=self.env, check=check,
                              capture_output=True, text=True)

    def container(self, service):
        return self.run("ps", "-q", service).stdout.strip()

    def request(self, method, path, body=None, key=None, timeout=10):
        conn = http.client.HTTPSConnection("127.0.0.1", self.port, context=self.ctx,
                                           timeout=timeout)
        headers = {"Content-Type": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        if key:
            headers["Idempotency-Key"] = key
        try:
            conn.request(method, path, body=json.dumps(body) if body is not None else None,
                         headers=headers)
            resp = conn.getresponse()
            data = resp.read()
            try:
                return resp.status, json.loads(data) if data else None
            except ValueError:
                return resp.status, None
        finally:
            conn.close()

    def wait(self, what, check, timeout=60):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                got = check()
                if got:
                    return got
            except (OSError, http.client.HTTPException):
                pass
            time.sleep(0.2)
        raise SystemExit(f"compose-demo: {what} did not happen within {timeout} s")

    def admin_xce(self, *args):
        tls = ["--tls-ca", "/etc/xce/tls/ca.pem", "--tls-cert", "/etc/xce/tls/admin.pem",
               "--tls-key", "/etc/xce/tls/admin-key.pem"]
        cmd = ["docker", "exec", self.container("c1"), "xce", "--peers", PEERS] + tls + list(args)
        return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip()

    def whole(self):
        """The primary's name once a primary and both standbys answer."""
        status, info = self.request("GET", "/v1/cluster")
        if status != 200 or not info.get("primary"):
            return None
        roles = sorted(m["role"] for m in info["members"])
        return info["primary"] if roles == ["primary", "standby", "standby"] else None


class Submitter(threading.Thread):
    """Submits over HTTPS until stopped; a 503 is retried with the same key after 1 s."""

    def __init__(self, cluster):
        super().__init__(daemon=True)
        self.cluster, self.stop, self.calls, self.acked = cluster, threading.Event(), [], {}

    def run(self):
        n = 0
        while not self.stop.is_set() and n < 100_000:
            n += 1
            key = f"demo-{n}-{uuid.uuid4().hex[:8]}"
            body = {"name": key, "command": ["true"]}
            while not self.stop.is_set():
                start = time.monotonic()
                try:
                    status, resp = self.cluster.request("POST", "/v1/jobs", body, key)
                except (OSError, http.client.HTTPException) as e:
                    status, resp = 0, {"error": str(e)}
                self.calls.append((start, time.monotonic(), status))
                if status in (200, 201):
                    self.acked[key] = resp["id"]
                    break
                time.sleep(1.0 if status == 503 else 0.2)
            time.sleep(0.05)


def fault_the_primary(cluster, submitter, fault, heal, hold=0.0):
    """Once the cluster is whole, runs `fault(primary, container)`, waits for a submit begun
    after it had returned to succeed, holds the fault `hold` seconds more, then runs `heal`.
    Returns the primary's name and that wait in ms (the failover as the HTTPS client saw it)."""
    primary = cluster.wait("a whole cluster", cluster.whole)
    time.sleep(1.0)
    container = cluster.container(primary)
    fault(primary, container)
    # From when the fault surely holds: its docker command has returned.
    since = time.monotonic()
    first_ok = cluster.wait("a submit after the fault", lambda: next(
        (end for (start, end, status) in list(submitter.calls)
         if start >= since and status in (200, 201)), None), timeout=30)
    time.sleep(hold)
    heal(primary, container)
    return primary, (first_ok - since) * 1000


def percentile(values, p):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--failovers", type=int, default=5)
    ap.add_argument("--partitions", type=int, default=0,
                    help="then cut the primary's container off the network this many times")
    ap.add_argument("--port", type=int, default=18443)
    args = ap.parse_args()
    certs = tempfile.mkdtemp(prefix="xce-compose-certs-")
    project = f"xcedemo{os.getpid()}"
    subprocess.run(["target/debug/xce", "tls", "init", certs, "--controllers", "c1,c2,c3",
                    "--workers", "w1,w2", "--schedulers", "s1", "--apiservers", "api1",
                    "--admins", "admin"], check=True, capture_output=True)
    os.chmod(certs, 0o755)
    cluster = Cluster(project, certs, args.port)
    try:
        log(f"bringing up {project}")
        cluster.run("up", "-d")
        cluster.wait("the apiserver's readiness",
                     lambda: cluster.request("GET", "/readyz")[0] == 200)
        cluster.token = cluster.admin_xce("token", "create", "--user", "alice")
        status, job = cluster.request("POST", "/v1/jobs",
                                      {"command": ["sh", "-c", "echo hi from $(hostname)"]},
                                      key="demo-first")
        if status not in (200, 201):
            raise SystemExit(f"compose-demo: submit answered {status}: {job}")
        job_id = job["id"]
        done = cluster.wait(f"job {job_id} to end", lambda: (
            lambda r: r[1] if r[0] == 200 and r[1]["state"] in ("done", "exited") else None)(
            cluster.request("GET", f"/v1/jobs/{job_id}")))
        log(f"job {job_id} ran on {done['host']} as {done['user']}: {done['state']}")
        if done["state"] != "done":
            raise SystemExit(f"compose-demo: job {job_id} ended {done}")

        submitter = Submitter(cluster)
        submitter.start()
        gaps, cuts = [], []
        docker = lambda *a: subprocess.run(["docker", *a], check=True, capture_output=True)
        for i in range(args.failovers):
            primary, ms = fault_the_primary(
                cluster, submitter,
                fault=lambda p, c: docker("kill", c),
                heal=lambda p, c: docker("start", c))
            gaps.append(ms)
            log(f"failover {i + 1}: killed {primary}; a submit succeeded {ms:.0f} ms later")
        network = f"{project}_xce"
        for i in range(args.partitions):
            # A partition in the kernel: the container's interface is gone, packets to and
            # from it are dropped; the process runs on, believing itself primary.
            primary, ms = fault_the_primary(
                cluster, submitter,
                fault=lambda p, c: docker("network", "disconnect", network, c),
                heal=lambda p, c: docker("network", "connect", "--alias", p, network, c),
                hold=2.0)
            cuts.append(ms)
            log(f"partition {i + 1}: cut {primary} off; a submit succeeded {ms:.0f} ms later")
        cluster.wait("a whole cluster", cluster.whole)
        time.sleep(1.0)
        submitter.stop.set()
        submitter.join(timeout=30)

        # Live jobs, and those that ended long enough ago to have retired to history (one that
        # retires between the two listings is in both).
        listed = {}
        for listing in ("/v1/jobs", "/v1/history"):
            cursor = None
            while True:
                path = f"{listing}?limit=1000" + (f"&cursor={cursor}" if cursor else "")
                status, page = cluster.request("GET", path)
                if status != 200:
                    raise SystemExit(f"compose-demo: {listing} answered {status}: {page}")
                for j in page["jobs"]:
                    listed.setdefault(j["name"], set()).add(j["id"])
                cursor = page.get("next_cursor")
                if not cursor:
                    break
        lost = [k for k, i in submitter.acked.items() if listed.get(k) != {i}]
        errors = {}
        for (_, _, status) in submitter.calls:
            if status not in (200, 201):
                errors[str(status)] = errors.get(str(status), 0) + 1
        summary = {
            "failovers": len(gaps),
            "failover_ms": {
                "p50": round(statistics.median(gaps)) if gaps else None,
                "p99": round(percentile(gaps, 99)) if gaps else None,
                "max": round(max(gaps)) if gaps else None,
            },
            "partitions": len(cuts),
            "partition_failover_ms": {
                "p50": round(statistics.median(cuts)) if cuts else None,
                "max": round(max(cuts)) if cuts else None,
            },
            "acknowledged": len(submitter.acked),
            "lost": len(lost),
            "non_2xx_answers": errors,
            "ok": not lost,
        }
        print(json.dumps(summary))
        return 0 if summary["ok"] else 1
    finally:
        log("tearing down")
        cluster.run("down", "-v", "--remove-orphans", check=False)
        shutil.rmtree(certs, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
