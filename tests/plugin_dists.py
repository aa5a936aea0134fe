"""Install throw-away plugin distributions for tests: a package plus a ``.dist-info`` on a temporary sys.path.

``importlib.metadata`` finds them exactly as it finds a pip-installed plugin, so the loader under
test runs its real discovery path. Load order is by distribution name: ``aaa-*`` loads before the
first-party plugins, ``blockspec-j*`` between blockspec-heads and blockspec-norms, ``zzz-*`` last.
"""

from __future__ import annotations

import importlib
import sys
import textwrap
from pathlib import Path

POSITIONS = {"first": "aaa-faulty", "middle": "blockspec-j-faulty", "last": "zzz-faulty"}

HEADER = """\
from attrs import frozen
import blockspec
from blockspec import hookimpl

@frozen(kw_only=True)
class TinyConfig:
    \"\"\"A config with no fields.\"\"\"

def build_identity(config, ctx):
    from torch import nn
    return nn.Identity()
"""

# Each fault: (module body after HEADER, a phrase the quarantine cause must contain, needs the probe).
FAULTS = {
    "import_error": ('raise ImportError("needs libfoo.so")', "ImportError: needs libfoo.so", False),
    "runtime_error": ('raise RuntimeError("boom at import")', "RuntimeError: boom at import", False),
    "system_exit": ("raise SystemExit(3)", "SystemExit: 3", False),
    "hook_typo": ("@hookimpl\ndef blockspec_regsiter(register):\n    pass", "unknown hook 'blockspec_regsiter'", False),
    "hook_typo_unmarked": ("def blockspec_regsiter(register):\n    pass", "did you mean 'blockspec_register'", False),
    "hook_unmarked": ("def blockspec_register(register):\n    pass", "not marked with @blockspec.hookimpl", False),
    "wrong_arguments": ("@hookimpl\ndef blockspec_register(registry):\n    pass", "{'registry'}", False),
    "api_version": ("BLOCKSPEC_API = 2\n@hookimpl\ndef blockspec_register(register):\n"
                    "    register('norm', 'apinorm', TinyConfig, build_identity)", "declares core API 2", False),
    "half_registered": ("@hookimpl\ndef blockspec_register(register):\n"
                        "    register('norm', 'halfnorm', TinyConfig, build_identity)\n"
                        "    raise RuntimeError('second registration failed')", "second registration failed", False),
    "bad_registration": ("@hookimpl\ndef blockspec_register(register):\n"
                         "    register('norm', 'goodnorm', TinyConfig, build_identity)\n"
                         "    register('normalisation', 'badkind', TinyConfig, build_identity)",
                         "unknown kind 'normalisation'", False),
    "shape_contract": ("@hookimpl\ndef blockspec_register(register):\n"
                       "    register('norm', 'shrinknorm', TinyConfig, build_shrink)\n"
                       "def build_shrink(config, ctx):\n"
                       "    from torch import nn\n"
                       "    return nn.Linear(ctx.model.d_model, 3)",
                       "norm:shrinknorm breaks the norm contract: norm(x): expected shape", True),
}

DUPLICATE = ("@frozen(kw_only=True)\nclass EpsConfig:\n    eps: float = 1e-6\n"
             "@hookimpl\ndef blockspec_register(register):\n"
             "    register('norm', 'rmsnorm', EpsConfig, build_identity)")


def write_distribution(root: Path, distribution: str, version: str, module: str, body: str) -> None:
    """A package ``module`` and ``<distribution>-<version>.dist-info`` with a ``blockspec`` entry point."""
    package = root / module
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(HEADER + "\n" + textwrap.dedent(body) + "\n", encoding="utf-8")
    info = root / f"{distribution.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {distribution}\nVersion: {version}\n",
                                   encoding="utf-8")
    (info / "entry_points.txt").write_text(f"[blockspec]\nplugin = {module}\n", encoding="utf-8")


class InstalledDists:
    """Puts ``root`` on sys.path for the duration of a ``with`` block and forgets its modules after."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def __enter__(self) -> InstalledDists:
        sys.path.insert(0, str(self.root))
        importlib.invalidate_caches()
        return self

    def __exit__(self, *exc) -> None:
        sys.path.remove(str(self.root))
        for name in [n for n, m in sys.modules.items() if str(self.root) in str(getattr(m, "__file__", "") or "")]:
            del sys.modules[name]
        importlib.invalidate_caches()
