"""Redis with credentials: a redis-server with `requirepass` and an ACL user limited to the sluice: keys
and the commands the worker uses. A worker with redis.user + redis.password (the ACL user) and one with
redis.password alone (the default user) both run jobs and write their state; a wrong password or none is
one line on stderr and exit 1, and the password never appears in the worker's output."""
import os
import random
import subprocess
import sys

import harness as h

PASS = "default pw %06x" % random.getrandbits(24)    # spaces: sent as one AUTH argument
USER, UPASS = "sluice", "acl-%06x" % random.getrandbits(24)


def start_fail(env, **settings):
    """A worker that must not start: (exit status, stderr)."""
    p = env.start_worker("w-bad-%06x" % random.getrandbits(24), **settings)
    try:
        rc = p.wait(timeout=30)
    except subprocess.TimeoutExpired:
        raise AssertionError("the worker started with bad credentials: " + open(p.errpath).read()[-400:])
    err = open(p.errpath).read()
    env.workers = {k: v for k, v in env.workers.items() if v is not p}
    return rc, err


def test(make):
    env = make("auth", topics=("jobs.b",), redis_args=["--requirepass", PASS], redis_auth=(PASS,))
    env.redis.cmd("ACL", "SETUSER", USER, "on", ">" + UPASS, "resetkeys", "~sluice:*", "resetchannels", "-@all",
                  "+@read", "+@write", "+@scripting", "+time", "+select", "+ping")
    a = env.start_worker("w-acl", **{"redis.user": USER, "redis.password": UPASS})
    b = env.start_worker("w-pass", **{"redis.password": PASS, "topic.jobs": "jobs.b"})
    uid = "%06x" % random.getrandbits(24)
    ja = [h.job_record("acl-%d-%s" % (i, uid), [3, 4, i], 3) for i in range(8)]
    jb = [h.job_record("pw-%d-%s" % (i, uid), [5, 6, i], 3) for i in range(8)]
    env.wait_assigned(a)
    env.wait_assigned(b)
    env.produce([(j["id"].encode(), h.encode_job(j)) for j in ja])
    env.produce([(j["id"].encode(), h.encode_job(j)) for j in jb], topic="jobs.b")
    res = env.results([j["id"] for j in ja + jb], timeout=60, idle=0.5)
    for j in ja + jb:
        rs = res.get(j["id"])
        assert rs and rs[0]["status"] == "OK", (j["id"], rs)
        assert rs[0]["worker"] == ("w-acl" if j in ja else "w-pass"), rs[0]["worker"]
        assert env.job_status(j["id"]) == "done", j["id"]   # state written under each identity
    assert env.redis.cmd("EXISTS", "sluice:worker:w-acl") == 1 and env.redis.cmd("EXISTS", "sluice:worker:w-pass") == 1
    # the ACL user's commands were all allowed (a denied one is in the ACL log)
    denied = env.redis.cmd("ACL", "LOG")
    assert not denied, denied
    # wrong password, none, a user without a password, credentials in the URL: one line, exit 1
    for settings, want in (({"redis.password": "wrong-" + uid}, "AUTH failed"),
                           ({"redis.user": USER, "redis.password": "wrong-" + uid}, "AUTH as sluice failed"),
                           ({}, "NOAUTH"),
                           ({"redis.user": USER}, "redis.user needs redis.password"),
                           ({"redis.url": "redis://u:%s@127.0.0.1:%d" % (UPASS, env.redis_port)}, "credentials")):
        rc, err = start_fail(env, **settings)
        lines = [l for l in err.splitlines() if l.strip()]
        assert rc == 1 and want in err and len(lines) == 1, (settings, rc, err)
        assert PASS not in err and UPASS not in err and "wrong-" not in err, err
        h.log("%-60s -> %s" % (settings, lines[0][:110]))
    for p in (a, b):
        assert p.poll() is None, "a worker died"
        out = open(p.errpath).read() + open(p.errpath + ".out").read()
        assert PASS not in out and UPASS not in out, "a password is in the worker's output"


if __name__ == "__main__":
    sys.exit(h.main(test))
