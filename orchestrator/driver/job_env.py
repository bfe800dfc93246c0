"""The Ray job this driver makes: what its processes get on every node, and
whether it runs under `ray job submit`.

Attached to a cluster, the job ships this package with its runtime
environment (`py_modules`): Ray zips the folder into the cluster's GCS once
per content and puts it on `sys.path` of every worker of the job, so a node
without the package installed still runs the trials. Only the package
travels; its dependencies (torch, Ray) must be installed on every node.
ORCHESTRATOR_SHIP_CODE=0 ships nothing (the nodes then import their own
copy). The embedded Ray is this machine: nothing to ship.

The user's own `--model` and `--dataset` modules travel the same way: the
folder of their top-level package (or the one file of a lone module), unless
installed in site-packages like torch.

Under `ray job submit` the job already has a runtime environment, which
`ray.init` merges with the one given here and refuses when both set the same
key or variable: what the submitted job sets is left to it.
"""

import json
import os
from pathlib import Path

import orchestrator
from orchestrator.config.references import REFERENCE, code_to_ship, imported_beside

SHIP_CODE_ENV_VAR = "ORCHESTRATOR_SHIP_CODE"
# Set by Ray's job supervisor for a submitted job's entrypoint (its runtime
# env and metadata as JSON); the variable `ray.init` itself reads.
RAY_JOB_CONFIG_ENV_VAR = "RAY_JOB_CONFIG_JSON_ENV_VAR"
PACKAGE_DIR = Path(orchestrator.__file__).resolve().parent
# Bytecode of whichever Python last ran here: the nodes compile their own.
PACKAGE_EXCLUDES = ["__pycache__"]


def under_ray_job() -> bool:
    """Whether this process is the entrypoint of a job submitted to Ray."""
    return RAY_JOB_CONFIG_ENV_VAR in os.environ


def submitted_runtime_env() -> dict:
    """The runtime env the submitted job was given (`--working-dir`,
    `--runtime-env-json`); empty when not under a job."""
    config = json.loads(os.environ.get(RAY_JOB_CONFIG_ENV_VAR) or "{}")
    return config.get("runtime_env") or {}


def package_to_ship() -> Path | None:
    """The package folder to ship to an attached cluster, or None when it is
    switched off or the submitted job carries the package already."""
    if os.environ.get(SHIP_CODE_ENV_VAR) == "0":
        return None
    submitted = submitted_runtime_env()
    if "py_modules" in submitted:
        return None  # the submitter chose the code; Ray would refuse a second list
    # `--working-dir .` from a checkout: the driver imported the package from
    # the job's copy of that folder (its cwd), which every worker gets too.
    if submitted.get("working_dir") and PACKAGE_DIR.is_relative_to(Path.cwd().resolve()):
        return None
    return PACKAGE_DIR


def user_code(config) -> tuple[Path, ...]:
    """Where the run's `--model` and `--dataset` references live, to ship, with the
    modules beside them that they import: the workers build the model; the data
    set is loaded here, but a data set's module may hold the model too, and a
    Dataset of the user's class is unpickled on the workers."""
    paths = (code_to_ship(reference) for reference in (config.model, config.dataset)
             if REFERENCE.match(reference))
    shipped = [path for path in paths if path is not None]
    return tuple(dict.fromkeys(
        [*shipped, *(beside for path in shipped for beside in imported_beside(path))]))


# The driver's settings of the collectives, which a worker on another node would
# otherwise take from its own node's raylet, not from the shell that started the
# sweep (torchrun's workers inherit that shell's): NCCL's and torch's NCCL knobs,
# and the network interface gloo binds (a wrong one shows as a hang until the
# process group's timeout).
FORWARDED_PREFIXES = ("NCCL_", "TORCH_NCCL_")
FORWARDED_NAMES = ("GLOO_SOCKET_IFNAME", "TORCH_DISTRIBUTED_DEBUG")


def forwarded_env(environ=os.environ) -> dict[str, str]:
    """This shell's settings of the collectives (FORWARDED_PREFIXES, FORWARDED_NAMES),
    for every process of an attached cluster's job, by name. None under `ray job
    submit`: its driver's environment is the head node's, not the user's shell (the
    job's own `--runtime-env-json` sets them for every worker)."""
    if under_ray_job():
        return {}
    return {name: value for name, value in sorted(environ.items())
            if name.startswith(FORWARDED_PREFIXES) or name in FORWARDED_NAMES}


def attached_runtime_env(env_vars: dict[str, str], user_code: tuple[Path, ...] = ()) -> dict:
    """`ray.init`'s runtime_env on an attached cluster: `env_vars` for every
    process, the package and `user_code` (the folders or files of the user's
    `--model` / `--dataset` modules), less what a submitted job sets itself: a
    job submitted with its own `py_modules`, or whose `--working-dir` holds the
    user's module, brings that code itself."""
    submitted = submitted_runtime_env()
    runtime_env = {"env_vars": {name: value for name, value in env_vars.items()
                                if name not in submitted.get("env_vars", {})}}
    package = package_to_ship()
    if package is None:
        return runtime_env
    in_working_dir = submitted.get("working_dir") and Path.cwd().resolve()
    shipped = [path for path in (package, *user_code)
               if path is package or not (in_working_dir and path.is_relative_to(in_working_dir))]
    runtime_env["py_modules"] = [str(path) for path in dict.fromkeys(shipped)]
    if "excludes" not in submitted:
        runtime_env["excludes"] = PACKAGE_EXCLUDES
    return runtime_env
