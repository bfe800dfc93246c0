"""The layers that must stay light: the report reads a finished sweep's files
with pandas alone, so a sweep's folder can be read where neither torch nor Ray
is; the config refuses bad input before either is imported."""

import pkgutil

import orchestrator.config
import orchestrator.report
from helpers import heavy_imports_of


def _modules_of(package) -> list[str]:
    """Every module found by walking the package: a new one is covered by itself."""
    return [module.name for module in pkgutil.walk_packages(package.__path__,
                                                            f"{package.__name__}.")]


def test_no_report_module_imports_torch_or_ray():
    modules = _modules_of(orchestrator.report)
    assert "orchestrator.report.scaling_model" in modules
    assert heavy_imports_of(modules) == []


def test_no_config_module_nor_the_records_import_torch_or_ray():
    modules = _modules_of(orchestrator.config)
    assert "orchestrator.config.cli" in modules
    assert heavy_imports_of([*modules, "orchestrator.records", "orchestrator.errors"]) == []
