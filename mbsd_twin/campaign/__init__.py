"""Campaigns (a face): scripted validation runs — parameter sweeps, FMU-vs-native comparisons,
offline calibrations over many recordings — run as tasks on a local process pool or a Ray
cluster, gathered into one summary report. See docs/campaigns.md."""

from .backends import PoolBackend, RayBackend, make_backend
from .config import CalibrateJob, Campaign, FmuJob, Limits, SweepJob, check_size, load_campaign, task_counts
from .runner import run_campaign
from .tasks import Task, expand, run_task, statistics

__all__ = ["CalibrateJob", "Campaign", "FmuJob", "Limits", "PoolBackend", "RayBackend", "SweepJob", "Task",
           "check_size", "expand", "load_campaign", "make_backend", "run_campaign", "run_task", "statistics",
           "task_counts"]
