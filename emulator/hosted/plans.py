"""Every plan limit and default of the hosted platform, each with the message that refuses going past it.

A trial organization (spec, "Trial organizations"): one database, `main`, of at most 1 CPU, 2048 MB, one
worker and a 10 GB disk; at most two services, each on one worker with at most 1 CPU and 2048 MB; a
50 GB media store (`media_quota_bytes`); 48 hours of life unless claimed (`trial_lifetime`). Other
organizations get the defaults below and no limits. Refusals are 402 `PLAN_LIMIT`, which the client
shows as they are.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import msgspec

from emulator.core.errors import PLAN_LIMIT
from emulator.hosted.records import DatabaseResources, DatabaseTarget, ServiceResources, Size

# A service's size keys.
SERVICE_SIZE = ("cpu", "memory_mb", "workers", "file_cache_gb")

# The metadata version a database runs before its first project.
PXT_MD_VERSION = 56
DEFAULT_DB = "main"

TRIAL_DATABASE = {"cpu": 1.0, "memory_mb": 2048, "workers": 1, "disk_gb": 10}
DEFAULT_DATABASE = {"cpu": 2.0, "memory_mb": 4096, "workers": 1, "disk_gb": 20}
TRIAL_DATABASES = 1

TRIAL_SERVICES = 2
TRIAL_SERVICE = {"cpu": 1.0, "memory_mb": 2048, "workers": 1}
DEFAULT_SERVICE = {"cpu": 1.0, "memory_mb": 1024, "workers": 1, "file_cache_gb": 10.0}
TRIAL_DISK_GB = 10  # a trial database's disk, and a trial service's file cache


def plan_name(trial: bool) -> str:
    return "trial" if trial else "free"


def base_resources(trial: bool) -> DatabaseResources:
    """What a database runs on before its first project: the plan's default size, no project."""
    size = TRIAL_DATABASE if trial else DEFAULT_DATABASE
    return DatabaseResources(
        cpu=size["cpu"],
        memory_mb=size["memory_mb"],
        workers=size["workers"],
        disk_gb=size["disk_gb"],
        fingerprint=None,
        pxt_md_version=PXT_MD_VERSION,
        default_bucket=None,
    )


def check_new_database(trial: bool, db: str) -> None:
    if trial:
        raise PLAN_LIMIT(
            f"A trial organization has one database, main; {db} cannot be created. Claim the organization to add more.",
        )


def declared_size(target: DatabaseTarget) -> dict[str, Size | None]:
    """A target's size keys as declared (None: left as they are)."""
    return {"cpu": target.cpu, "memory_mb": target.memory_mb, "workers": target.workers, "disk_gb": target.disk_gb}


def check_database_size(target: DatabaseTarget, trial: bool) -> None:
    """A declared database size within the plan (positivity is the request's own check)."""
    if not trial:
        return
    over = [
        f"{n} {v} (at most {TRIAL_DATABASE[n]})"
        for n, v in declared_size(target).items()
        if v is not None and v > TRIAL_DATABASE[n]
    ]
    if over:
        raise PLAN_LIMIT(
            f"A trial database is limited to 1 CPU, 2048 MB, 1 worker and 10 GB disk; the project asks for "
            f"{', '.join(over)}. Lower them in pixeltable.toml, or claim the organization and upgrade.",
        )


class ServiceSize(msgspec.Struct, kw_only=True):
    """A service's resources as the platform fills them in: the declared ones over the defaults."""

    cpu: Size
    memory_mb: Size
    workers: Size
    file_cache_gb: Size


def service_resources(name: str, declared: ServiceResources | None, trial: bool) -> ServiceSize:
    """A service's resources: the declared ones over the defaults, within the plan."""
    d = declared or ServiceResources()
    sent = {"cpu": d.cpu, "memory_mb": d.memory_mb, "workers": d.workers, "file_cache_gb": d.file_cache_gb}
    resources: dict[str, Size] = {k: d if (d := sent.get(k)) is not None else v for k, v in DEFAULT_SERVICE.items()}
    if trial:
        over = [f"{k} {resources[k]} (at most {v})" for k, v in TRIAL_SERVICE.items() if resources[k] > v]
        if over:
            raise PLAN_LIMIT(
                f"A trial service runs on 1 worker with at most 1 CPU and 2048 MB; {name} asks for "
                f"{', '.join(over)}. Lower them in pixeltable.toml, or claim the organization and upgrade.",
            )
    return msgspec.convert(resources, ServiceSize)


def check_service_count(subject: str, count: int, trial: bool) -> None:
    """`count`: the services the database would have once the submission is accepted."""
    if trial and count > TRIAL_SERVICES:
        raise PLAN_LIMIT(
            f"A trial has at most {TRIAL_SERVICES} services; {subject} would have {count}. "
            "Delete one with pxt service prune, or claim the organization and upgrade.",
        )


def disk_full_message(what: str, size: str, service: bool) -> str:
    knob = "file_cache_gb in the service's resources" if service else "disk_gb in pixeltable.toml"
    return f"disk full: the {what} has used all of its {size} GB disk; raise {knob} (a trial allows {TRIAL_DISK_GB} GB)"


@dataclass(frozen=True)
class UsageLine:
    """A line of `get_usage`'s resources: what is used of what the plan allows (None: no limit)."""

    label: str
    used: int
    limit: int | None
    unit: Literal["count", "bytes"]


def usage_resources(trial: bool, databases: int, services: int) -> list[UsageLine]:
    """The count lines of `get_usage` (the media line is the media store's)."""
    return [
        UsageLine("Databases", databases, TRIAL_DATABASES if trial else None, "count"),
        UsageLine("Services", services, TRIAL_SERVICES if trial else None, "count"),
    ]
