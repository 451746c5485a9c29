"""Runs the README's "Calling it from any language" as written: every sh and python block, in
order, in a scratch directory holding Protos/, with SUBSTATUS_API_KEY and APP_ID set (a read key
and an app made here over gRPC) and the README's addresses replaced by the running server's.

usage: readme.py GRPC_ADDR HTTP_ADDR OPERATOR_KEY REPOSITORY
Prints `ok` or `FAIL` for every block, then `N passed, N failed`.
"""
import json, os, re, subprocess, sys, tempfile

import substatus_python

grpc_addr, http_addr, operator_key, repository = sys.argv[1:5]
substatus_python.generate(os.path.join(repository, "Protos"))
_, app_id, read_key = substatus_python.setup_tenant(grpc_addr, operator_key, "readme")

readme = open(os.path.join(repository, "README.md")).read()
section = readme.split("\n## Calling it from any language\n", 1)[1].split("\n## ", 1)[0]
blocks = re.findall(r"```(sh|python)\n(.*?)```", section, re.S)
work = tempfile.mkdtemp()
os.symlink(os.path.join(repository, "Protos"), os.path.join(work, "Protos"))
environment = dict(os.environ, SUBSTATUS_API_KEY=read_key, APP_ID=app_id, PYTHONPATH=os.path.join(work, "gen"),
                   PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
INTRO_USED = "ELIGIBILITY_REASON_INTRO_ALREADY_USED"


def first_product(text):
    return json.loads(text)["users"][0]["products"][0]


# What each block must print, in README order; a README with other blocks must update this list.
checks = [
    ("curl CheckEligibility", lambda out: first_product(out)["introductory"]["reason"] == INTRO_USED),
    ("curl's invalid_argument", lambda out: json.loads(out)["code"] == "invalid_argument"
     and json.loads(out)["message"] == "queries: must not be empty"
     and json.loads(out)["details"][0]["type"] == "google.rpc.BadRequest"),
    ("the Python code", lambda out: os.path.exists(os.path.join(work, "gen/substatus/v1/eligibility_service_connect.py"))),
    ("Connect in Python", lambda out: f"reason: {INTRO_USED}" in out
     and "Code.INVALID_ARGUMENT queries: must not be empty" in out),
    ("gRPC in Python", lambda out: f"reason: {INTRO_USED}" in out),
    ("buf curl", lambda out: "substatus.v1.EligibilityService/CheckEligibility" in out and INTRO_USED in out
     and '"userId": "user-1"' in out),
]
passed = failed = 0
if len(blocks) != len(checks):
    print(f"FAIL the section has {len(blocks)} code blocks, readme.py checks {len(checks)}: update readme.py")
    failed += 1
for (language, code), (label, check) in zip(blocks, checks):
    code = code.replace("127.0.0.1:8080", http_addr).replace("127.0.0.1:50051", grpc_addr)
    command = ["bash", "-euo", "pipefail", "-c", code] if language == "sh" else [sys.executable, "-c", code]
    run = subprocess.run(command, cwd=work, env=environment, capture_output=True, text=True, timeout=60)
    try:
        ok = run.returncode == 0 and check(run.stdout)
    except Exception:  # the check found what it reads missing or malformed
        ok = False
    if ok:
        print(f"ok {label}")
        passed += 1
    else:
        print(f"FAIL {label}: exit {run.returncode}\n{code}\nstdout: {run.stdout}\nstderr: {run.stderr}")
        failed += 1
print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
