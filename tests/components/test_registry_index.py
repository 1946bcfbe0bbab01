"""The registry imports a component module when one of its names is first read (``rpn2c/components/index.py``
says which): the index is current, reading names in any order leaves the registry as importing every module does,
checking a spec imports the modules of the components it uses, and a name the index lacks is still found."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
INDEX = ROOT / "rpn2c" / "components" / "index.py"


def _python(code: str) -> str:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_the_index_is_current():
    """Fails when a component was added, renamed or moved without regenerating the index."""
    built = _python("import sys\nfrom rpn2c.components import index_build\n"
                    "sys.stdout.write(index_build.render(index_build.build()))")
    assert built == INDEX.read_text(encoding="utf-8"), \
        "rpn2c/components/index.py is stale: run `python -m rpn2c.components.index_build --write`"


LISTING = ("import json\nfrom rpn2c.components import REGISTRY, all_entries, names\n"
           "print(json.dumps([{f: list(t) for f, t in REGISTRY.items()}, names(), "
           "[(e.family, e.name, e.cls.__qualname__) for e in all_entries()]]))")


def test_names_read_in_any_order_leave_the_registry_as_importing_every_module_does():
    """Late modules' names read first, through each way the checker reads them; then the whole listing (families
    in registration order, names, entries) equals the one of a registry that imported everything at once."""
    lazily = _python("from rpn2c.components.registry import REGISTRY, lookup, names\n"
                     "first = names()\n"
                     "assert lookup('relu', ('expansion', 'compression', 'processing')).family == 'processing'\n"
                     "assert 'graph_attention' in REGISTRY['interdependence'] and 'tied' in REGISTRY['reconciliation']\n"
                     "assert REGISTRY['compression'].get('patch_max').name == 'patch_max'\n"
                     f"{LISTING}\nassert names() == first")
    eagerly = _python(f"from rpn2c.components.registry import load_all\nload_all()\n{LISTING}")
    assert json.loads(lazily) == json.loads(eagerly)


def test_checking_a_spec_imports_the_modules_of_the_components_it_uses():
    loaded = json.loads(_python(
        "import json, sys, rpn2c\nrpn2c.check_file('specs/cnn.rpn')\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('rpn2c.components.'))))"))
    assert {"rpn2c.components.kappa_pooling", "rpn2c.components.xi"} <= set(loaded)  # patch_max, grid_patch
    assert not {"rpn2c.components.kappa_wavelets", "rpn2c.components.xi_kernels", "rpn2c.components.cells",
                "rpn2c.components.sequence", "rpn2c.components.xi_graph"} & set(loaded)


def test_a_name_the_index_does_not_know_is_found_after_importing_every_module():
    """A stale index (a component added without regenerating it) costs time, never a name."""
    out = _python("from rpn2c.components import index, registry\n"
                  "del index.INDEX['expansion']['chebyshev']\n"
                  "entry = registry.lookup('chebyshev', ('expansion',))\n"
                  "print(entry.cls.__module__, bool(registry._LOADED))")
    assert out.split() == ["rpn2c.components.kappa_expansion", "True"]
