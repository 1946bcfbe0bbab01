"""``specs/mamba_lm.rpn`` ↔ transformers' ``MambaForCausalLM`` (tied embedding and output head).

    spec                         transformers
    e.weight                     backbone.embeddings.weight (and lm_head.weight: tied, one tensor)
    h.{i}.p.pre.0.weight         backbone.layers.{i}.norm.weight
    h.{i}.p.psi.weight           backbone.layers.{i}.mixer.in_proj.weight   (rows: the scanned branch, then the gate)
    h.{i}.conv.{weight,bias}     backbone.layers.{i}.mixer.conv1d.{weight,bias}
    h.{i}.s.A_log_l0             backbone.layers.{i}.mixer.A_log
    h.{i}.s.weight_x_l0          backbone.layers.{i}.mixer.x_proj.weight    (rows: Δ's rank R, B, C)
    h.{i}.s.weight_dt_l0         backbone.layers.{i}.mixer.dt_proj.weight
    h.{i}.s.bias_dt_l0           backbone.layers.{i}.mixer.dt_proj.bias
    h.{i}.s.D_l0                 backbone.layers.{i}.mixer.D
    h.{i}.o.psi.weight           backbone.layers.{i}.mixer.out_proj.weight
    n.weight                     backbone.norm_f.weight
"""

from rpn2c.frontends.weights import Link, WeightMap

_MIXER = "backbone.layers.{i}.mixer."

MAPS = {"mamba_lm": WeightMap("mamba_lm", (
    Link("e.weight", ("backbone.embeddings.weight",)),
    Link("e.weight", ("lm_head.weight",)),
    Link("h.{i}.p.pre.0.weight", ("backbone.layers.{i}.norm.weight",)),
    Link("h.{i}.p.psi.weight", (_MIXER + "in_proj.weight",)),
    *(Link(f"h.{{i}}.conv.{p}", (_MIXER + f"conv1d.{p}",)) for p in ("weight", "bias")),
    *(Link(f"h.{{i}}.s.{p}_l0", (_MIXER + lib,)) for p, lib in (
        ("A_log", "A_log"), ("weight_x", "x_proj.weight"), ("weight_dt", "dt_proj.weight"),
        ("bias_dt", "dt_proj.bias"), ("D", "D"))),
    Link("h.{i}.o.psi.weight", (_MIXER + "out_proj.weight",)),
    Link("n.weight", ("backbone.norm_f.weight",)),
))}
