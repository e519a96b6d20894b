"""The image recipe and the ECS deployment files, checked without Docker or AWS."""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from service.server.routes import router
from service.server.settings import Settings
from tests.support.dockerfile import ECS, ROOT, Image, container, task_definition

IMAGE = Image.read(ROOT / "Dockerfile")
SERVICE = task_definition("task-definition.json")
MIGRATE = task_definition("migrate-task-definition.json")
SECRETS = {"LAKELOCK_DATABASE_URL", "LAKELOCK_TOKENS"}


def _pins() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "deploy" / "requirements.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, sep, version = line.partition("==")
            assert sep, f"not pinned with ==: {line}"
            pins[canonicalize_name(name)] = version
    return pins


def _routes() -> set[str]:
    return {route.path for route in router.routes}


# -- the Dockerfile ----------------------------------------------------------------------------


def test_hadolint_passes_without_warnings():
    hadolint = shutil.which("hadolint", path=str(ROOT / ".venv" / "bin")) or shutil.which(
        "hadolint"
    )
    if hadolint is None:
        pytest.skip("hadolint is not installed")
    done = subprocess.run([hadolint, "Dockerfile"], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0 and not done.stdout.strip(), done.stdout + done.stderr


def test_the_runtime_stage_is_slim_python_and_copies_only_the_built_venv_and_app():
    assert IMAGE.stages[0].name == "build" and len(IMAGE.stages) == 2
    assert IMAGE.runtime.base == "python:3.11-slim"
    copies = IMAGE.runtime.all("COPY")
    assert copies and all(args.startswith("--from=build ") for args in copies)


def test_the_image_carries_the_server_and_not_the_parts_of_other_hosts():
    copied = IMAGE.copied_paths()
    assert {"service/wire/", "service/lock/", "service/server/", "migrations/"} <= set(copied)
    for other in ("service/client", "service/ops", "jobkit", "ingest_gate", "compactor", "demo"):
        assert not any(path.startswith(other) for path in copied), other
    assert not any(path.rstrip("/") == "service" for path in copied), "service/ as a whole"


def test_the_image_runs_as_a_numeric_non_root_user():
    assert IMAGE.user.isdigit() and int(IMAGE.user) != 0
    assert container(SERVICE)["user"] == IMAGE.user


def test_the_image_serves_one_port_on_all_interfaces():
    assert IMAGE.runtime.all("EXPOSE") == ["8737"]
    assert IMAGE.env["LAKELOCK_HOST"] == "0.0.0.0"
    assert IMAGE.env["LAKELOCK_PORT"] == "8737"
    assert IMAGE.cmd == ["python", "-m", "service"]


def test_the_healthcheck_probes_healthz_with_the_python_of_the_image():
    assert IMAGE.healthcheck[:2] == ["python", "-c"]
    assert "/healthz" in IMAGE.healthcheck[2] and "/healthz" in _routes()


def test_the_pinned_requirements_are_the_service_install_and_nothing_of_the_other_hosts():
    pins = _pins()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for spec in project["dependencies"] + project["optional-dependencies"]["service"]:
        requirement = Requirement(spec)
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{name} is a dependency but not pinned in deploy/requirements.txt"
        assert requirement.specifier.contains(pins[name]), f"{name}=={pins[name]} vs {spec}"
    # the jobs', the operators' and the tests' packages stay out of the image (pyiceberg is in
    # it for the catalog front, without pyarrow: the front reads metadata and manifests only)
    for name in ("pyspark", "pytest", "typer", "pyarrow"):
        assert name not in pins, f"{name} is pinned for the service image"


def test_the_pinned_requirements_are_closed_under_their_own_dependencies():
    pins = _pins()
    environment = {"extra": ""}
    for name, version in pins.items():
        try:
            installed = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        if installed.version != version:
            continue  # only the installed version's metadata is at hand
        for spec in installed.requires or []:
            requirement = Requirement(spec)
            if requirement.marker and not requirement.marker.evaluate(environment):
                continue
            assert canonicalize_name(requirement.name) in pins, f"{name} needs {spec}"


def test_the_build_context_sends_what_the_dockerfile_copies_and_no_local_state():
    ignore = (ROOT / ".dockerignore").read_text().splitlines()
    assert "*" in ignore, "an allowlist: everything else stays out"
    allowed = {line[1:] for line in ignore if line.startswith("!")}
    for path in IMAGE.copied_paths():
        assert path in allowed, f"the Dockerfile copies {path}, which .dockerignore drops"
        assert (ROOT / path).exists(), path
    assert not {".venv/", ".git/", "var/", "tests/"} & allowed


# -- ECS ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("task", [SERVICE, MIGRATE], ids=["service", "migrate"])
def test_secrets_come_from_secrets_manager_never_as_plain_environment(task):
    spec = container(task)
    plain = {entry["name"] for entry in spec["environment"]}
    assert not SECRETS & plain
    for secret in spec["secrets"]:
        assert secret["valueFrom"].startswith("arn:aws:secretsmanager:"), secret
    assert "LAKELOCK_DATABASE_URL" in {s["name"] for s in spec["secrets"]}


def test_the_service_gets_its_tokens_and_the_migration_task_does_not():
    assert {s["name"] for s in container(SERVICE)["secrets"]} == SECRETS
    migrate_env = {e["name"]: e["value"] for e in container(MIGRATE)["environment"]}
    # migrate serves nothing; it needs the database only
    assert migrate_env["LAKELOCK_AUTH"] == "off"


def test_the_service_believes_x_forwarded_for_from_the_load_balancer_subnets_only():
    from service.server.settings import parse_proxies

    env = {e["name"]: e["value"] for e in container(SERVICE)["environment"]}
    assert parse_proxies(env["LAKELOCK_TRUSTED_PROXIES"]) == ["10.0.0.0/24", "10.0.1.0/24"]


@pytest.mark.parametrize("task", [SERVICE, MIGRATE], ids=["service", "migrate"])
def test_logs_go_to_cloudwatch_with_awslogs(task):
    logging = container(task)["logConfiguration"]
    assert logging["logDriver"] == "awslogs"
    assert {"awslogs-group", "awslogs-region", "awslogs-stream-prefix"} <= logging["options"].keys()


@pytest.mark.parametrize("task", [SERVICE, MIGRATE], ids=["service", "migrate"])
def test_every_environment_value_is_a_valid_setting(task):
    known = {f"LAKELOCK_{name.upper()}" for name in Settings.model_fields}
    values = {e["name"]: e["value"] for e in container(task)["environment"]}
    assert set(values) <= known
    Settings(
        **{name.removeprefix("LAKELOCK_").lower(): value for name, value in values.items()},
        tokens="ingest:job:s3cret-value",
    )


def test_the_service_reaches_its_s3_warehouse_with_the_task_role_and_no_key():
    """The warehouse on S3, reached with the task role's credentials (the AWS chain's ECS
    container provider): no key in the environment or the secrets, and a policy that lets the
    role do what the catalog front does there (list, read, write, purge), objects in the
    warehouse only."""
    spec = container(SERVICE)
    env = {e["name"]: e["value"] for e in spec["environment"]}
    warehouse = env["LAKELOCK_CATALOG_WAREHOUSE"]
    assert warehouse == "s3://lake-tables/warehouse"
    assert env["LAKELOCK_CATALOG_S3_REGION"] == "eu-west-1"
    named = set(env) | {s["name"] for s in spec["secrets"]}
    assert not {n for n in named if n.startswith("AWS_")}, "keys come from the task role"
    assert SERVICE["taskRoleArn"].endswith(":role/lakelock-task")
    policy = task_definition("task-role-policy.json")
    granted = {a: s for s in policy["Statement"] for a in s["Action"]}
    # unconditioned: S3 answers a missing key 404 (a client's 400) only to a caller that may
    # list the bucket, else 403 (which the front would take for a storage fault)
    assert granted["s3:ListBucket"] == {
        "Sid": "ListTheBucket",
        "Effect": "Allow",
        "Action": ["s3:ListBucket"],
        "Resource": "arn:aws:s3:::lake-tables",
    }
    for action in ("s3:GetObject", "s3:PutObject", "s3:DeleteObject"):
        assert granted[action]["Resource"] == "arn:aws:s3:::lake-tables/warehouse/*"


def test_ecs_waits_longer_than_the_shutdown_grace_before_killing_the_service():
    spec = container(SERVICE)
    values = {e["name"]: e["value"] for e in spec["environment"]}
    grace = float(
        values.get("LAKELOCK_SHUTDOWN_GRACE_S", Settings.model_fields["shutdown_grace_s"].default)
    )
    # the grace, then the lifespan shutdown (sweeper join up to 5 s, pool disposal)
    assert spec["stopTimeout"] >= grace + 10
    assert spec["stopTimeout"] <= 120, "Fargate's limit"


def test_the_container_health_check_is_the_images_and_probes_a_real_route():
    check = container(SERVICE)["healthCheck"]
    assert check["command"] == ["CMD", *IMAGE.healthcheck]
    assert check["timeout"] > 4, "longer than the probe's own urllib timeout"


def test_the_service_listens_on_the_port_the_target_group_checks():
    spec = container(SERVICE)
    template = json.loads((ECS / "target-group.cfn.json").read_text())
    group = template["Resources"]["TargetGroup"]["Properties"]
    assert [m["containerPort"] for m in spec["portMappings"]] == [group["Port"]] == [8737]
    assert group["HealthCheckPath"] == "/readyz" and "/readyz" in _routes()
    assert group["TargetType"] == "ip", "awsvpc tasks register by IP"


def test_the_migration_task_runs_migrate_on_the_same_image():
    spec = container(MIGRATE)
    assert spec["command"] == ["python", "-m", "service", "migrate"]
    assert spec["image"] == container(SERVICE)["image"]


def test_the_cloudformation_snippet_passes_cfn_lint():
    # the dev extra installs cfn-lint beside this interpreter: CI never skips this test
    cfn_lint = shutil.which("cfn-lint", path=str(Path(sys.executable).parent)) or shutil.which(
        "cfn-lint"
    )
    if cfn_lint is None:
        if os.environ.get("CI"):
            pytest.fail("no cfn-lint in CI: the dev extra (bin/bootstrap) installs it")
        pytest.skip("cfn-lint is not installed (pip install -e '.[dev]')")
    done = subprocess.run(
        [cfn_lint, str(ECS / "target-group.cfn.json")], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr
