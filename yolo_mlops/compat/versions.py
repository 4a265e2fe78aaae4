"""The releases of the outside libraries this package declares it works with, and the check of what is installed.

The ranges are the package's own requirements (pyproject.toml, read back from the installed metadata), so there
is one list; the exact set CI and the image install is `requirements/lock.txt`. An installed release outside its
range is refused at start in one line that names the package, its version and the range, before any run exists;
`YOLO_MLOPS_ANY_VERSIONS=1` lets a command run on it anyway (untested).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cache
from importlib import metadata

from yolo_mlops.errors import ConfigError

DISTRIBUTION = "yolo-mlops"
# the libraries whose releases change what the project does (the rest only need to import)
CHECKED = ("torch", "torchvision", "ultralytics", "mlflow", "prefect", "nvidia-ml-py")
# distributions that provide a declared one: the GPU checks carry MLflow's client alone (mlflow-skinny)
PROVIDERS = {"mlflow": ("mlflow", "mlflow-skinny")}
OVERRIDE_VARIABLE = "YOLO_MLOPS_ANY_VERSIONS"


@dataclass(frozen=True)
class OutOfRange:
    package: str
    version: str
    declared: str  # the specifier, e.g. ">=2.5,<2.16"

    def line(self) -> str:
        return f"{self.package} {self.version} is outside the tested range {self.package}{self.declared}"


@cache
def declared_ranges() -> dict[str, str]:
    """Package -> the version specifier this package declares for it ({} when it is not installed, as when the
    source tree runs uninstalled)."""
    from packaging.requirements import Requirement

    try:
        requirements = metadata.requires(DISTRIBUTION) or []
    except metadata.PackageNotFoundError:
        return {}
    ranges = {}
    for text in requirements:
        requirement = Requirement(text)
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue  # an extra's requirement (dev tools)
        name = requirement.name.lower()
        if name in CHECKED and str(requirement.specifier):
            ranges[name] = str(requirement.specifier)
    return ranges


def installed_version(package: str) -> str | None:
    """The installed release of `package` (or of a distribution providing it); None when there is none."""
    for distribution in PROVIDERS.get(package, (package,)):
        try:
            return metadata.version(distribution)
        except metadata.PackageNotFoundError:
            continue
    return None


def out_of_range(ranges: dict[str, str] | None = None) -> list[OutOfRange]:
    """The checked packages installed at a release their declared range leaves out (a missing one is not listed:
    its import fails with its own message)."""
    from packaging.specifiers import SpecifierSet
    from packaging.version import InvalidVersion, Version

    found = []
    for package, declared in (declared_ranges() if ranges is None else ranges).items():
        version = installed_version(package)
        if version is None:
            continue
        try:
            inside = SpecifierSet(declared).contains(Version(version), prereleases=True)
        except InvalidVersion:
            inside = False
        if not inside:
            found.append(OutOfRange(package, version, declared))
    return found


def check_installed() -> None:
    """Raise ConfigError with one line when a checked package is outside its declared range."""
    if os.environ.get(OVERRIDE_VARIABLE, "").strip().lower() in ("1", "true", "yes"):
        return
    problems = out_of_range()
    if problems:
        raise ConfigError(
            "; ".join(p.line() for p in problems) + f" (set {OVERRIDE_VARIABLE}=1 to run on it anyway, untested)"
        )


def version_at_least(package: str, minimum: str) -> bool:
    """True when the installed `package` is at least `minimum` (False when it is missing)."""
    from packaging.version import Version

    version = installed_version(package)
    return version is not None and Version(version) >= Version(minimum)
