"""Fuzz inputs: grammar-based generation, valid-leaning variants, token and byte mutations of the shipped specs.

Each input is a function of one seed (``make_input``), so a failure is reproduced by its number alone.
"""

from __future__ import annotations

import random
import re
import typing
from pathlib import Path

from rpn2c.components.registry import REGISTRY, SLOT_FAMILIES, ValueRef

ROOT = Path(__file__).resolve().parents[2]
TOKEN = re.compile(r'"(?:[^"\\\n]|\\.)*"|#[^\n]*|[A-Za-z_][A-Za-z0-9_]*|[0-9]+(?:\.[0-9]*)?|//|\S')
INTS = ["0", "1", "2", "3", "4", "7", "16", "-1", "1000", "100000", "1000000000", "99999999999999999999", "2.5",
        "0.0", "1e308", "1e999"]
#: integer hyper-parameter values of the stress sweep: degrees, hops, ranks and widths a resource guard must see
STRESS = ["12", "16", "30", "64", "200", "1000", "4096", "65536", "100000"]


# ------------------------------------------------------------------------------------------------------- seeds
def seed_specs() -> list[tuple[str, str]]:
    """(name, text) of every shipped spec and every registry entry's example."""
    out = []
    for folder in ("specs", "examples/specs"):
        for p in sorted((ROOT / folder).rglob("*.rpn")):
            out.append((str(p.relative_to(ROOT)), p.read_text(encoding="utf-8")))
    for family, entries in REGISTRY.items():
        seen = set()
        for entry in entries.values():
            if entry.cls in seen:
                continue
            seen.add(entry.cls)
            text = entry.cls.example_spec()
            if text:
                out.append((f"example:{family}:{entry.name}", text))
    return out


# ------------------------------------------------------------------------------------------------------- generate
def _value(rng: random.Random, ann, refs: list[str], stress: bool = False) -> str | None:
    """A spec expression for a hyper-parameter of type ``ann`` (None: leave it out); ``stress``: integers are large
    as often as not (:data:`STRESS`)."""
    origin, args = typing.get_origin(ann), typing.get_args(ann)
    if origin is typing.Annotated:
        return _value(rng, args[0], refs, stress)
    if ann is ValueRef:
        return rng.choice(refs) if refs else None
    if origin is typing.Literal:
        v = rng.choice(args)
        return f'"{v}"' if isinstance(v, str) else str(v).lower() if isinstance(v, bool) else str(v)
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        options = [a for a in args if a is not type(None)]
        return _value(rng, rng.choice(options), refs, stress) if options else None
    if origin is list:
        inner = args[0] if args else int
        return "[" + ", ".join(filter(None, (_value(rng, inner, refs, stress)
                                             for _ in range(rng.randint(1, 3))))) + "]"
    if ann is bool:
        return rng.choice(["true", "false"])
    if ann is int:
        if stress and rng.random() < 0.5:
            return rng.choice(STRESS)
        return rng.choice(["1", "2", "3", "4", "2", "3", "0", "-1", "8", "64", "100000"])
    if ann is float:
        return rng.choice(["0.5", "1.0", "0.1", "2.0", "0.0", "-1.0", "1e30", "1e-06", "1e-12", "0.999"])
    if ann is str:
        return rng.choice(['"x"', '"mean"', '"edges"'])
    return rng.choice(["1", "0.5", "true", '"x"'])


def _component(rng: random.Random, slot: str, refs: list[str], stress: bool = False) -> str:
    families = SLOT_FAMILIES.get(slot, (slot,))
    family = rng.choice(families)
    entry = REGISTRY[family][rng.choice(sorted(REGISTRY[family]))]
    kwargs = []
    for key, f in entry.schema.model_fields.items():
        if f.is_required() or rng.random() < (0.5 if stress else 0.25):
            v = _value(rng, f.annotation, refs, stress)
            if v is not None:
                kwargs.append(f"{key} = {v}")
    return f"{entry.name}({', '.join(kwargs)})" if kwargs or rng.random() < 0.5 else entry.name


_INPUTS = [
    ("vector", "vector[B, {f}]"), ("sequence", "sequence[B, T, {f}]"), ("sequence", "sequence[B, {n}, {f}]"),
    ("nodes", "nodes[N, {f}]"), ("image", "image[B, {c}, {h}, {h}]"), ("signal", "signal[B, {c}, {h}]"),
    ("set", "set[B, {n}, {f}]"), ("volume", "volume[B, {c}, 4, 4, 4]"),
]


def generate(rng: random.Random) -> str:
    """A grammar-shaped, mostly valid spec built from registry entries."""
    kind, typ = rng.choice(_INPUTS)
    typ = typ.format(f=rng.choice([1, 3, 4, 8]), n=rng.choice([2, 3, 5]), c=rng.choice([1, 2, 3]),
                     h=rng.choice([4, 6, 8]))
    lines = [f"  input x: {typ}"]
    refs = []
    if kind == "nodes" or rng.random() < 0.1:
        lines.append("  input edges: edges[2, E]")
        refs.append("edges")
        if rng.random() < 0.5:  # heads of one layer may name different edge lists
            lines.append("  input edges2: edges[2, F]")
            refs.append("edges2")
    if rng.random() < 0.1:
        lines.append("  input mask: block_mask[T, T]")
        refs.append("mask")
    values = ["x"]
    blocks = []
    for i in range(rng.randint(1, 4)):
        src = rng.choice(values)
        name = f"v{i}"
        r = rng.random()
        if r < 0.55:
            settings = []
            for slot in ("kappa", "psi", "xi_attribute", "xi_instance", "xi_attribute_post", "xi_instance_prior",
                         "pi", "fusion", "channel_fusion"):
                if rng.random() < (0.3 if slot in ("kappa", "psi") else 0.12):
                    settings.append(f"{slot} = {_component(rng, slot, refs)}")
            if rng.random() < 0.8:
                settings.append(f"out = {rng.choice([1, 2, 4, 8])}")
            for key, vals in (("channels", [1, 2, 3]), ("heads", [1, 2, 4]), ("groups", [1, 2]),
                              ("bias", ["true", "false", '"untied"'])):
                if rng.random() < 0.08:
                    settings.append(f"{key} = {rng.choice(vals)}")
            for key in ("pre", "post"):
                if rng.random() < 0.2:
                    settings.append(f"{key} = [{_component(rng, key, refs)}]")
            kw = rng.choice(["head", "head", "compress"])
            lines.append(f"  {name} = {kw}({src}) {{\n    " + "\n    ".join(settings) + "\n  }")
        elif r < 0.7:
            heads = []
            for h in range(rng.randint(1, 3)):
                hs = [f"out = {rng.choice([2, 4])}"]
                if rng.random() < 0.5:
                    slot = rng.choice(["xi_instance", "kappa", "psi"])
                    hs.append(f"{slot} = {_component(rng, slot, refs)}")
                heads.append(f"    head h{h} {{ " + " ".join(hs) + " }")
            tail = f"    fusion = {_component(rng, 'fusion', refs)}" if rng.random() < 0.5 else ""
            lines.append(f"  {name} = layer({src}) {{\n" + "\n".join(heads) + f"\n{tail}\n  }}")
        elif r < 0.88:
            op = rng.choice(sorted(REGISTRY["op"]) + sorted(REGISTRY["processing"]))
            args = [src] + ([rng.choice(values)] if op in ("add", "mul", "sub", "concat") else [])  # add(x, x) too
            lines.append(f"  {name} = {op}({', '.join(args)})")
        else:
            bname = f"blk{i}"
            blocks.append(f"block {bname}(w = {rng.choice([2, 4])}) {{\n  input z\n  y = head(z) {{ out = w "
                          f"post = [{_component(rng, 'post', refs)}] }}\n  return y\n}}\n")
            count = rng.choice(["1", "2", "3", "100000000"])
            call = f"repeat({count}) {bname}({src})" if rng.random() < 0.5 else f"{bname}({src}, w = 4)"
            lines.append(f"  {name} = {call}")
        values.append(name)
    lines.append(f"  return {values[-1]}")
    return "".join(blocks) + "model fuzz {\n" + "\n".join(lines) + "\n}\n"


_EXTRA_SETTINGS = ["channels = 2", "heads = 2", "post = [relu]", "post = [layer_norm]", 'bias = "untied"',
                   "bias = false", "pi = linear", "pi = identity", "pre = [tanh]", "channel_fusion = sum",
                   "fusion = concat", "groups = 2", "channels = 3", "heads = 3"]


_SLOTS = ("kappa", "psi", "xi_attribute", "xi_instance", "xi_attribute_post", "xi_instance_prior", "pi", "fusion",
          "channel_fusion")
_INPUT_NAME = re.compile(r"^\s*input\s+([A-Za-z_]\w*)\s*:\s*(edges|block_mask|edge_weight|tokens)", re.M)


def vary(rng: random.Random, text: str) -> str:
    """A valid-leaning variant of a working spec: small integers changed, head settings added (fixed ones, or a
    registry component in a random slot with drawn hyper-parameters, naming the spec's edge and mask inputs): a
    grammar-level edit that keeps the statement structure."""
    refs = [m[1] for m in _INPUT_NAME.finditer(text)]

    def number(m):
        return rng.choice(["1", "2", "3", "4", "5", "8"]) if rng.random() < 0.3 else m.group()

    lines = []
    for line in text.split("\n"):
        if not line.lstrip().startswith("#"):
            line = re.sub(r"(?<![\w.])[0-9]+(?![\w.])", number, line)
        lines.append(line)
        if re.match(r"\s*out = ", line) and rng.random() < 0.5:
            if rng.random() < 0.5:
                lines.append("    " + rng.choice(_EXTRA_SETTINGS))
            else:
                slot = rng.choice(_SLOTS)
                lines.append(f"    {slot} = {_component(rng, slot, refs)}")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------------- mutate
def mutate(rng: random.Random, text: str) -> str:
    """One to three token or line mutations of ``text``."""
    for _ in range(rng.randint(1, 3)):
        op = rng.choice(["del_tok", "dup_tok", "swap_tok", "del_line", "dup_line", "swap_line", "number",
                         "number", "rename", "nest", "insert"])
        if op.endswith("line"):
            lines = text.split("\n")
            i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
            if op == "del_line":
                del lines[i]
            elif op == "dup_line":
                lines.insert(i, lines[i])
            else:
                lines[i], lines[j] = lines[j], lines[i]
            text = "\n".join(lines)
            continue
        toks = [m for m in TOKEN.finditer(text) if not m.group().startswith("#")]
        if not toks:
            return text
        if op == "number":
            nums = [m for m in toks if m.group()[0].isdigit()] or toks
            m = rng.choice(nums)
            text = text[:m.start()] + rng.choice(INTS) + text[m.end():]
        elif op == "rename":
            idents = sorted({m.group() for m in toks if m.group()[0].isalpha() or m.group()[0] == "_"})
            old = rng.choice(idents)
            new = rng.choice(["x", "y", "head", "relu", "zz", "model", "B", "edges", "none", "heads", old + "2",
                              "lambda", "self", "graph", "values", "train", "__init__"])
            text = re.sub(rf"\b{re.escape(old)}\b", new, text, count=rng.randint(0, 3))
        elif op == "nest":
            m = rng.choice(toks)
            k = rng.choice([3, 50, 150, 2000])
            wrap = rng.choice([("(", ")"), ("[", "]"), ("-", ""), ("1 + ", "")])
            text = text[:m.start()] + wrap[0] * k + m.group() + wrap[1] * k + text[m.end():]
        elif op == "insert":
            m = rng.choice(toks)
            piece = rng.choice(["heads = 100000", "channels = 1000000", "out = 1000000000", "repeat(1000000)",
                                'import "/dev/zero" as z', 'import "../../x.rpn" as z', "layer", "{", "}", ",",
                                "=", "edges", "x", "head h { out = 2 }"])
            text = text[:m.start()] + piece + " " + text[m.start():]
        else:
            i, j = sorted((rng.randrange(len(toks)), rng.randrange(len(toks))))
            a, b = toks[i], toks[j]
            if op == "del_tok":
                text = text[:a.start()] + text[a.end():]
            elif op == "dup_tok":
                text = text[:a.end()] + " " + a.group() + text[a.end():]
            elif i != j:
                text = text[:a.start()] + b.group() + text[a.end():b.start()] + a.group() + text[b.end():]
    return text


def mutate_bytes(rng: random.Random, text: str) -> bytes:
    """Byte-level damage: flips, invalid UTF-8, NUL bytes, truncation."""
    data = bytearray(text.encode("utf-8"))
    for _ in range(rng.randint(1, 4)):
        if not data:
            break
        i = rng.randrange(len(data))
        op = rng.randrange(5)
        if op == 0:
            data[i] ^= 1 << rng.randrange(8)
        elif op == 1:
            data[i:i] = rng.choice([b"\xff", b"\xe9", b"\xc3", b"\x00", b"\xed\xa0\x80", b"\xef\xbb\xbf"])
        elif op == 2:
            del data[i:]
        elif op == 3:
            data[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 6)))
        else:
            data[i] = rng.choice(b"{}()[]=,.#\"\\\n\t ")
    return bytes(data)


_SWEEP_TYPES = ["vector[B, 4]", "vector[B, 1]", "sequence[B, T, 3]", "sequence[B, 1, 1]", "image[B, 2, 6, 6]",
                "nodes[N, 3]", "set[B, 3, 4]", "signal[B, 2, 8]", "volume[B, 1, 4, 4, 4]"]
_SWEEP_SLOTS = ("kappa", "psi", "xi_attribute", "xi_instance", "xi_attribute_post", "xi_instance_prior", "pi", "pre",
                "post")


def sweep(rng: random.Random, stress: bool = False) -> str:
    """One head over one input type with one to three registry components in random slots (drawn hyper-parameters,
    edge and mask inputs to name): every entry meets every slot and type, a few at a time. ``stress``: integer
    hyper-parameters are large half of the time (degrees, hops, ranks: what the resource guards must see)."""
    settings = []
    for _ in range(rng.randint(1, 3)):
        slot = rng.choice(_SWEEP_SLOTS)
        comp = _component(rng, slot, ["edges", "mask"], stress)
        settings.append(f"{slot} = [{comp}]" if slot in ("pre", "post") else f"{slot} = {comp}")
    kw = rng.choice(["head", "head", "compress"])
    if kw == "head":
        settings.append(f"out = {rng.choice([1, 2, 3])}")
    mask = rng.choice(["T, T", "B, T", "N", "T"])
    return (f"model m {{\n  input x: {rng.choice(_SWEEP_TYPES)}\n  input edges: edges[2, E]\n"
            f"  input mask: block_mask[{mask}]\n  y = {kw}(x) {{\n    " + "\n    ".join(settings) +
            "\n  }\n  return y\n}\n")


def make_input(seed: int, seeds: list[tuple[str, str]]) -> tuple[str, str | bytes]:
    """(origin, input) number ``seed``: generated (a free spec, a one-head registry sweep, a stress sweep, or a
    variant of a seed) 40%, token-mutated 40%, byte-damaged 20%."""
    rng = random.Random(seed)
    which = seed % 5
    if which == 0:
        if seed % 10 == 0:
            return "generated", generate(rng)
        return ("stress", sweep(rng, stress=True)) if seed % 20 == 15 else ("sweep", sweep(rng))
    name, text = seeds[rng.randrange(len(seeds))]
    if which == 1:
        return f"varied:{name}", vary(rng, text)
    if which in (2, 3):
        return f"mutated:{name}", mutate(rng, text)
    return f"bytes:{name}", mutate_bytes(rng, text)
