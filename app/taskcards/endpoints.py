from __future__ import annotations

from dataclasses import asdict
from typing import Any

from fastapi import APIRouter

from app.deps import CatalogDep
from app.errors import NotFound, error_responses
from app.hardware import HARDWARE_CLASSES

router = APIRouter(prefix="/v1", tags=["catalog"])


class TaskNotFound(NotFound):
    pass


@router.get("/tasks")
def list_tasks(catalog: CatalogDep) -> dict[str, Any]:
    """Public task cards: windows with issue times, budgets, metrics; never labels."""
    return {"catalog": catalog.version,
            "tasks": [c.public_dict() for c in catalog.cards()], "suites": catalog.suites()}


@router.get("/tasks/{task_id}", responses=error_responses(TaskNotFound))
def get_task(task_id: str, catalog: CatalogDep) -> dict[str, Any]:
    if task_id not in catalog.task_ids():
        raise TaskNotFound(f"task {task_id} not found")
    return catalog.card(task_id).public_dict()


@router.get("/hardware-classes")
def list_hardware_classes() -> dict[str, Any]:
    return {"hardware_classes": [asdict(h) for h in HARDWARE_CLASSES.values()]}
