"""Read the Dockerfile and the ECS task definitions as the tests need them, without Docker.

image = Image.read(ROOT / "Dockerfile")
image.cmd, image.env, image.healthcheck, image.copied_paths(), image.stages
task = task_definition("task-definition.json")      # placeholders filled in
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
ECS = ROOT / "deploy" / "ecs"
PLACEHOLDERS = {
    "AWS_ACCOUNT_ID": "123456789012",
    "AWS_REGION": "eu-west-1",
    "IMAGE": "123456789012.dkr.ecr.eu-west-1.amazonaws.com/lakelock:1.0.0",
    "ALB_SUBNETS": "10.0.0.0/24,10.0.1.0/24",
    "WAREHOUSE_BUCKET": "lake-tables",
}


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, keyword: str) -> list[str]:
        return [args for kw, args in self.instructions if kw == keyword]


@dataclass
class Image:
    stages: list[Stage]

    @classmethod
    def read(cls, path: Path) -> Image:
        text = re.sub(r"\\\n", " ", path.read_text())
        stages: list[Stage] = []
        for line in text.splitlines():
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            keyword, _, args = line.partition(" ")
            keyword, args = keyword.upper(), args.strip()
            if keyword == "FROM":
                parts = args.split()
                stages.append(Stage(parts[0], parts[2] if len(parts) > 2 else None))
            else:
                stages[-1].instructions.append((keyword, args))
        return cls(stages)

    @property
    def runtime(self) -> Stage:
        return self.stages[-1]

    @property
    def cmd(self) -> list[str]:
        return json.loads(self.runtime.all("CMD")[-1])

    @property
    def env(self) -> dict[str, str]:
        found: dict[str, str] = {}
        for args in self.runtime.all("ENV"):
            for pair in shlex.split(args):
                key, _, value = pair.partition("=")
                found[key] = value
        return found

    @property
    def user(self) -> str:
        return self.runtime.all("USER")[-1]

    @property
    def healthcheck(self) -> list[str]:
        args = self.runtime.all("HEALTHCHECK")[-1]
        return json.loads(args[args.index("CMD") + len("CMD") :].strip())

    def copied_paths(self) -> list[str]:
        """Build-context paths that some stage COPYs (not those copied between stages)."""
        paths = []
        for stage in self.stages:
            for args in stage.all("COPY"):
                if "--from" in args:
                    continue
                paths.extend(args.split()[:-1])
        return paths


def task_definition(name: str) -> dict[str, Any]:
    text = (ECS / name).read_text()
    for key, value in PLACEHOLDERS.items():
        text = text.replace("${" + key + "}", value)
    assert "${" not in text, f"{name} has a placeholder the docs do not list"
    return json.loads(text)


def container(task: dict[str, Any]) -> dict[str, Any]:
    (only,) = task["containerDefinitions"]
    return only
