from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field


class DailySubmissionsOut(BaseModel):
    limit: int
    used: int = Field(description="submissions in the window that count (platform faults and "
                                  "cancelled runs do not)")
    remaining: int
    resets_at: datetime = Field(description="when the oldest counted submission leaves the window")
    window_s: int


class RunsInFlightOut(BaseModel):
    limit: int
    used: int
    remaining: int


class QuotaOut(BaseModel):
    exempt: bool = Field(description="staff are not limited")
    submissions_per_day: DailySubmissionsOut
    runs_in_flight: RunsInFlightOut
