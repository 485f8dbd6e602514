"""Campaigns (a face): scripted validation runs — parameter sweeps, FMU-vs-native comparisons,
offline calibrations over many recordings — run as tasks on a local process pool or a Ray
cluster, gathered into one summary report. See docs/campaigns.md."""

from .backends import PoolBackend, RayBackend, make_backend
from .config import CalibrateJob, Campaign, FmuJob, SweepJob, load_campaign
from .runner import run_campaign
from .tasks import Task, expand, run_task, statistics

__all__ = ["CalibrateJob", "Campaign", "FmuJob", "PoolBackend", "RayBackend", "SweepJob", "Task", "expand",
           "load_campaign", "make_backend", "run_campaign", "run_task", "statistics"]
