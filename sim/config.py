"""Experiment configuration: pydantic models at the edge, validated once, errors as one line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from sim.presets import GPU_PRESETS, MODEL_PRESETS
from sim.strict_input import (
    MAX_CONFIG_BYTES,
    MAX_CONFIG_VALUES,
    count_values,
    load_yaml,
    number_error,
    reject_duplicate_json_keys,
    yaml_error_text,
)
from sim.xnode.network import KERNEL_COPY_BYTES_PER_S, KERNEL_MESSAGE_S, LINK_PRESETS, RDMA_POST_S
from sim.xnode.page_index_codec import single_page_entry_bytes

# Mean CPU time of one prefix_affinity decision (24.8 us; p99 68 us) measured by
# `python -m benchmarks.router` (8 nodes, 100k cached prefixes, one core; docs/routing.md).
ROUTER_DECISION_TIME_S = 25e-6
# Seconds to bring a crashed serving process with a 70B-class model back: Anyscale measured
# 4 min 25 s to download and initialise Llama-2-70B before their loader (20 s after it):
# "Loading Llama-2 70b 20x faster with Anyscale Endpoints" (anyscale.com/blog, Oct 2023).
RESTART_S = 265.0
# Size bounds: past these a run would exhaust memory or never end, so the config is refused.
MAX_NODES = 1024
MAX_DURATION_S = 1e7  # simulated seconds (~116 days)
MAX_SERIES_ROWS = 10_000_000  # time-series rows per arm: duration_s / sample_interval_s x nodes


class ConfigError(ValueError):
    """A config, trace or argument the user must fix; the CLI prints it as one line, exit 2."""


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=False, allow_inf_nan=False)


class ModelConfig(Strict):
    name: str = "custom"
    num_layers: int = Field(gt=0)
    num_q_heads: int = Field(gt=0)
    num_kv_heads: int = Field(gt=0)
    head_dim: int = Field(gt=0)
    hidden_size: int = Field(gt=0)
    intermediate_size: int = Field(gt=0)
    vocab_size: int = Field(gt=0)
    dtype_bytes: int = Field(default=2, gt=0)

    @model_validator(mode="after")
    def _gqa_divides(self) -> ModelConfig:
        if self.num_q_heads % self.num_kv_heads:
            raise ValueError("num_q_heads must be a multiple of num_kv_heads (GQA groups)")
        return self

    @property
    def kv_bytes_per_token(self) -> int:
        """The article's formula: 2 (K and V) x layers x kv_heads x head_dim x bytes."""
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * self.dtype_bytes

    @property
    def num_params(self) -> int:
        h, q, kv, d = self.hidden_size, self.num_q_heads, self.num_kv_heads, self.head_dim
        attention = h * q * d + 2 * h * kv * d + q * d * h
        mlp = 3 * h * self.intermediate_size  # gated MLP: gate, up, down
        return self.num_layers * (attention + mlp) + 2 * self.vocab_size * h


class GpuConfig(Strict):
    name: str = "custom"
    hbm_bytes: float = Field(gt=0)
    hbm_bytes_per_s: float = Field(gt=0)
    bf16_flops_per_s: float = Field(gt=0)
    interconnect_bytes_per_s: float = Field(gt=0)
    calibration: str | None = None
    # Host time of every engine step that the priced kernels leave out (the sync, sampling, the
    # scheduler's CPU time, the serving loop), seconds, with where the number comes from. 0 and
    # "not measured" until engine/ measures it (`kvsched validate`: sim.latency.base.StepOverhead
    # says how every term below enters a step's price).
    step_overhead_s: float = Field(default=0.0, ge=0)
    # Extra cost of a step that carries a prefill chunk (an engine that replays CUDA graphs for
    # decode-only steps runs those eagerly). `kvsched validate` measures both on an engine run.
    prefill_step_overhead_s: float = Field(default=0.0, ge=0)
    # Device time per prefill token of the step (norms, rotary, activations: elementwise work the
    # GEMM and attention tables leave out), seconds per token; under the floors below.
    token_overhead_s: float = Field(default=0.0, ge=0)
    # Host time per prefill token (gathering its id, hashing the chunk's pages), after the floors.
    host_token_overhead_s: float = Field(default=0.0, ge=0)
    # Host time per decoding sequence of the step (the scheduler's work on it, gathering its ids
    # and block table), seconds per sequence; added after the device time, never under a floor.
    decode_overhead_s: float = Field(default=0.0, ge=0)
    # Host time a step with a prefill chunk adds on top of those (its inputs are built eagerly,
    # not copied into a captured graph): per decoding sequence, per chunk, and per token of the
    # chunks' context (block-table rows, the prefix match and the prefill plan over cached pages).
    mixed_decode_overhead_s: float = Field(default=0.0, ge=0)
    chunk_overhead_s: float = Field(default=0.0, ge=0)
    context_overhead_s: float = Field(default=0.0, ge=0)
    # The least a step with a prefill chunk takes on the device (before every host term): an engine that
    # launches such a step's attention from the host layer by layer cannot finish it faster
    # than it issues it, so small mixed steps are host-bound at about this time.
    mixed_step_floor_s: float = Field(default=0.0, ge=0)
    # Above this many tokens a mixed step is launched whole from the host (no graphs): its own
    # floor, usually higher (every kernel of every layer, not only attention, is a launch).
    mixed_graph_max_tokens: int = Field(default=512, ge=0)
    eager_step_floor_s: float = Field(default=0.0, ge=0)
    step_overhead_source: str = "not measured"
    # The serving machine's device time over the calibration machine's for the same kernels
    # (H200s differ by a few %): every priced kernel time is multiplied by it. `kvsched validate`
    # measures it on an engine run's decode-only steps (their GPU time over the priced kernels).
    device_time_scale: float = Field(default=1.0, gt=0)
    # Device time per token of the step's decode contexts beyond the tables' price: on served
    # steps timed alone, attention alone matched the decode table while the rest of the step grew
    # with the KV tokens read (engine/runs/README.md, round 7's decode steps timed alone),
    # seconds per token. `kvsched validate` measures it with the scale above; added after it.
    decode_kv_overhead_s: float = Field(default=0.0, ge=0)
    # A decode's read of a KV page another decode of the same step reads too (shared prefixes
    # after hits): "l2", priced from the calibration file's measured `decode_shared_reads` term
    # (sim/latency/shared_reads.py; the file must have it); "hbm", as a read of a distinct page
    # (the decode table as measured).
    shared_page_reads: Literal["l2", "hbm"] = "hbm"
    # A decode batch of unequal contexts: "measured", priced above the equal-length decode table
    # at its mean by the calibration file's `decode_ragged` term (sim/latency/ragged.py; the
    # file must have it); "mean", at the table's time for its mean context.
    ragged_decode: Literal["measured", "mean"] = "mean"
    # A step's prefill chunks: "measured", priced as the one launch the engine runs them in by
    # the calibration file's `prefill_batches` launch model (sim/latency/prefill_batch.py; the
    # file must have one for the attention shard); "sum", each chunk at its table time (the
    # table is measured one chunk per launch).
    prefill_batch: Literal["measured", "sum"] = "sum"


class NodeConfig(Strict):
    num_gpus: int = Field(default=2, gt=0)
    tp: int = Field(default=2, gt=0)
    # Share of HBM given to weights + KV cache (vLLM's gpu_memory_utilization); the KV pool is
    # what is left after the weights.
    kv_memory_fraction: float = Field(default=0.9, gt=0, le=1)
    max_num_batched_tokens: int = Field(default=8192, gt=0)
    max_num_seqs: int = Field(default=256, gt=0)
    # Admit a waiting request only while this share of the KV pool stays free (free + evictable)
    # after its first chunk: headroom for the running requests' decode growth (vLLM v0's
    # watermark was 0.01). 0 disables the guard (vLLM v1 behaviour: admit, preempt later).
    admission_watermark: float = Field(default=0.01, ge=0, lt=1)
    # The KV pool of one node in bytes, instead of what kv_memory_fraction leaves after the
    # weights (a regime map sweeps it directly); at most the HBM left after the weights.
    kv_pool_bytes: float | None = Field(default=None, gt=0)
    # Decode attention kernel: `paged` reads every sequence's whole context; `cascade` reads the
    # leading pages a group of decodes shares once per group (kernels/cascade_decode.py).
    decode_attention: Literal["paged", "cascade"] = "paged"

    @model_validator(mode="after")
    def _tp_fits(self) -> NodeConfig:
        # A node is one engine: one tensor-parallel group with one KV pool, one scheduler and one
        # latency model. Data parallelism is more nodes (cluster.num_nodes), each with its own cache.
        if self.num_gpus != self.tp:
            raise ValueError(
                f"num_gpus={self.num_gpus} must equal tp={self.tp} (data parallel: add nodes)"
            )
        return self


class ClusterConfig(Strict):
    num_nodes: int = Field(default=4, gt=0, le=MAX_NODES)


class RouterConfig(Strict):
    """The central scheduler's capacity (sim/router.py): parallel lanes x time per decision."""

    lanes: int = Field(default=1, gt=0)
    # Seconds one decision holds a lane (default: our router's measured cost, see above).
    decision_time_s: float = Field(default=ROUTER_DECISION_TIME_S, ge=0)
    lane_by: Literal["any", "prefix"] = "any"  # prefix: a request's lane = hash of its first page


class CacheConfig(Strict):
    mechanism: Literal["contiguous", "paged"] = "paged"
    page_size: int = 16
    prefix_cache: bool = True
    index: Literal["two_level", "hash_only", "radix"] = "two_level"
    hash_bits: int = Field(default=64, ge=1, le=64)
    reclaim: Literal["immediate", "epoch"] = "epoch"
    # Index the full pages of generated tokens too, as they are computed (vLLM v1 and SGLang do):
    # a later prompt that quotes an earlier answer (multi_turn, session replay) reuses its KV, and
    # a request recomputed after preemption reuses its own outputs. false: prompt pages only.
    cache_outputs: bool = True
    # Contiguous baseline: each request reserves prompt + max_new_tokens (the client's bound,
    # capped at max_model_len) up front; the pool grows by segment_bytes up to the physical limit.
    max_model_len: int = Field(default=40960, gt=0)
    max_new_tokens: int = Field(default=4096, gt=0)
    # ... or, with reservation: max_model_len, the whole context window for every request (what a
    # framework without a per-request bound does; sim/kv/manager.py ContiguousKV).
    reservation: Literal["prompt_plus_max_new_tokens", "max_model_len"] = (
        "prompt_plus_max_new_tokens"
    )
    # Contiguous baseline, no hole at the physical limit: wait (stall until memory frees), reject
    # (the request fails at once) or crash (the serving process dies: in-flight requests fail,
    # closed-loop clients retry after restart_s, open-loop ones count as failed, the pool comes
    # back empty, the router avoids the node meanwhile). Paged admission never fails this way.
    on_oom: Literal["wait", "reject", "crash"] = "wait"
    restart_s: float = Field(default=RESTART_S, ge=0)
    segment_bytes: float = Field(default=8e9, gt=0)
    # Evict at least this many pages per eviction round (amortises the policy's scoring scan).
    eviction_batch_pages: int = Field(default=64, gt=0)
    # Pitfall 3: a step's readers outlive it by this many seconds (the scheduler runs ahead of the
    # GPU); with reclaim: immediate a page reused inside the window is a use-after-free.
    race_window_s: float = Field(default=0.0, ge=0)
    # Protected zone (sim/kv/protected_zone.py): pages reused by at least protected_share of the
    # node's last protected_window requests are never evicted; at most protected_max_fraction of
    # the pool.
    protected_zone: bool = False
    protected_share: float = Field(default=0.95, gt=0, le=1)
    protected_window: int = Field(default=200, gt=0)
    protected_max_fraction: float = Field(default=0.25, ge=0, le=1)

    @field_validator("page_size")
    @classmethod
    def _power_of_two(cls, v: int) -> int:
        if v < 1 or v > 512 or v & (v - 1):
            raise ValueError("must be a power of two from 1 to 512")
        return v


class PolicySpec(Strict):
    name: str
    params: dict[str, Any] = Field(default_factory=dict)


class PoliciesConfig(Strict):
    routing: PolicySpec = PolicySpec(name="prefix_affinity")
    eviction: PolicySpec = PolicySpec(name="lru")
    admission: PolicySpec = PolicySpec(name="always")
    scheduling: PolicySpec = PolicySpec(name="newest")  # preemption victim (vLLM: the newest)


class WorkloadConfig(Strict):
    name: str = "seed"
    params: dict[str, Any] = Field(default_factory=dict)


class LinkConfig(Strict):
    """One NIC (or NVLink port) per lane; sim/network.py documents the presets' sources."""

    name: str = "custom"
    bandwidth_bytes_per_s: float = Field(gt=0)  # each direction
    latency_s: float = Field(ge=0)  # one message, one way
    max_message_bytes: int = Field(gt=0)  # one message: an index part or one batched read


class NetworkConfig(Strict):
    link: LinkConfig = Field(default="rdma-400g", validate_default=True)  # a preset name or fields
    mode: Literal["naive", "batched_async", "rdma"] = "rdma"
    nics_per_node: int | None = Field(default=None, gt=0)  # None: one per GPU (DGX-style)
    kernel_message_s: float = Field(default=KERNEL_MESSAGE_S, ge=0)
    kernel_copy_bytes_per_s: float = Field(default=KERNEL_COPY_BYTES_PER_S, gt=0)
    rdma_post_s: float = Field(default=RDMA_POST_S, ge=0)

    @field_validator("link", mode="before")
    @classmethod
    def _link_preset(cls, v: Any) -> Any:
        return _preset(v, LINK_PRESETS, "link")


class PlacementConfig(Strict):
    """Where a request's KV pages may live (sim/placement.py): only on its node, or also on peers."""

    policy: Literal["local_only", "spill", "shard"] = "local_only"
    shard_nodes: int = Field(default=2, gt=0)  # shard: stripe over this many nodes (owner included)
    stripe_pages: int = Field(default=64, gt=0)  # shard: consecutive pages per node per stripe
    min_prompt_tokens: int = Field(
        default=0, ge=0
    )  # only prompts at least this long leave the node


class ExperimentConfig(Strict):
    name: str = "seed"
    seed: int = Field(default=0, ge=0, lt=2**63)
    duration_s: float = Field(default=1200.0, gt=0, le=MAX_DURATION_S)
    # Sample per-node time series every this many simulated seconds.
    sample_interval_s: float = Field(default=1.0, gt=0)
    # Write <arm>/steps.csv: one row per executed step per node (sim/steps.py; the timeline and
    # `kvsched validate` read it). Off by default: one row per step is the largest output.
    record_steps: bool = False
    # The reference driver: one SimPy event per node step (sim/node.py). Off, a node runs the
    # steps that end before the next event without one; results are the same (tests check it).
    exact_steps: bool = False
    # Measurement window. Requests that arrive before warmup_s are served but not counted (the
    # caches and queues fill first). With drain_s > 0 no request is sent after duration_s and the
    # run goes on until every counted request is done or drain_s more seconds pass; without it a
    # request still in flight at duration_s is `unfinished` (summary.json counts it and gives
    # censored P99 lower bounds). Throughput divides by the window: warmup_s to the run's end.
    warmup_s: float = Field(default=0.0, ge=0)
    drain_s: float = Field(default=0.0, ge=0)
    workload: WorkloadConfig = WorkloadConfig()
    model: ModelConfig = Field(
        default="article-70b", validate_default=True
    )  # a preset name or shapes
    gpu: GpuConfig = Field(default="h200", validate_default=True)
    node: NodeConfig = NodeConfig()
    cluster: ClusterConfig = ClusterConfig()
    router: RouterConfig = RouterConfig()
    cache: CacheConfig = CacheConfig()
    policies: PoliciesConfig = PoliciesConfig()
    network: NetworkConfig = Field(default_factory=NetworkConfig)
    placement: PlacementConfig = Field(default_factory=PlacementConfig)
    arms: dict[str, dict[str, Any]] = Field(default_factory=dict)

    @field_validator("network")
    @classmethod
    def _message_holds_one_entry(cls, v: NetworkConfig, info: ValidationInfo) -> NetworkConfig:
        cluster = info.data.get("cluster")
        need = single_page_entry_bytes(cluster.num_nodes - 1 if cluster else 0)
        if v.link.max_message_bytes < need:
            raise ValueError(
                f"link.max_message_bytes={v.link.max_message_bytes} cannot hold one page's "
                f"index entry ({need} bytes)"
            )
        return v

    @field_validator("placement")
    @classmethod
    def _placement_fits(cls, v: PlacementConfig, info: ValidationInfo) -> PlacementConfig:
        cluster, cache = info.data.get("cluster"), info.data.get("cache")
        if cluster and v.policy == "shard" and v.shard_nodes > cluster.num_nodes:
            raise ValueError(
                f"shard_nodes={v.shard_nodes} is larger than the cluster "
                f"(cluster.num_nodes={cluster.num_nodes})"
            )
        if cache and v.policy != "local_only" and cache.mechanism != "paged":
            raise ValueError(f"policy={v.policy} needs cache.mechanism=paged")
        return v

    @field_validator("model", mode="before")
    @classmethod
    def _model_preset(cls, v: Any) -> Any:
        return _preset(v, MODEL_PRESETS, "model")

    @field_validator("gpu", mode="before")
    @classmethod
    def _gpu_preset(cls, v: Any) -> Any:
        return _preset(v, GPU_PRESETS, "gpu")

    @model_validator(mode="after")
    def _warmup_inside_run(self) -> ExperimentConfig:
        if self.warmup_s >= self.duration_s:
            raise ValueError(
                f"warmup_s={self.warmup_s} must be shorter than duration_s={self.duration_s}"
            )
        return self

    @model_validator(mode="after")
    def _series_bounded(self) -> ExperimentConfig:
        rows = self.duration_s / self.sample_interval_s * self.cluster.num_nodes
        if rows > MAX_SERIES_ROWS:
            raise ValueError(
                f"sample_interval_s={self.sample_interval_s:g}: duration_s / sample_interval_s x "
                f"cluster.num_nodes = {rows:.3g} time-series rows, above the bound of "
                f"{MAX_SERIES_ROWS:,}; raise sample_interval_s"
            )
        return self

    @model_validator(mode="after")
    def _race_window_is_local(self) -> ExperimentConfig:
        # Pages released on a peer outside its step loop have no closing epoch there: the reader
        # race window is modelled for a node's own pages only.
        if self.cache.race_window_s > 0 and self.placement.policy != "local_only":
            raise ValueError("cache.race_window_s > 0 needs placement.policy: local_only")
        return self

    @model_validator(mode="after")
    def _page_bytes_aligned(self) -> ExperimentConfig:
        # A page must be a whole number of 256-byte GPU access granules on each GPU (per layer,
        # per K or V, per TP shard), as the article requires.
        per_layer = self.cache.page_size * self.model.num_kv_heads * self.model.head_dim
        shard_bytes = (
            per_layer * self.model.dtype_bytes // max(1, min(self.node.tp, self.model.num_kv_heads))
        )
        if self.cache.mechanism == "paged" and shard_bytes % 256:
            raise ValueError(
                f"cache.page_size={self.cache.page_size} gives {shard_bytes} bytes per page per layer "
                "per GPU, not a multiple of 256"
            )
        return self

    @property
    def kv_capacity_bytes(self) -> int:
        """KV pool of one node: HBM share minus the weights (replicated across TP groups)."""
        dp = self.node.num_gpus // self.node.tp
        usable = self.node.num_gpus * self.gpu.hbm_bytes * self.node.kv_memory_fraction
        weights = dp * self.model.num_params * self.model.dtype_bytes
        free = usable - weights
        if self.node.kv_pool_bytes is not None:
            room = self.node.num_gpus * self.gpu.hbm_bytes - weights
            if self.node.kv_pool_bytes > room:
                raise ConfigError(
                    f"node.kv_pool_bytes={self.node.kv_pool_bytes:.3g} is more than the HBM left "
                    f"after the weights ({room / 1e9:.0f} GB)"
                )
            free = self.node.kv_pool_bytes
        if free <= 0:
            raise ConfigError(
                f"model: {self.model.name} weights ({weights / 1e9:.0f} GB) do not fit in node memory "
                f"({usable / 1e9:.0f} GB); raise node.num_gpus"
            )
        page_bytes = self.cache.page_size * self.model.kv_bytes_per_token
        if free < page_bytes:
            raise ConfigError(
                f"model: the KV pool ({free:.0f} bytes after the weights) holds no page of "
                f"cache.page_size={self.cache.page_size} tokens ({page_bytes} bytes); "
                "raise node.num_gpus or gpu.hbm_bytes"
            )
        return int(free)


def _preset(v: Any, presets: dict[str, dict], field: str) -> Any:
    if isinstance(v, str):
        if v not in presets:
            raise ValueError(f"unknown preset {v!r}; allowed: {', '.join(sorted(presets))}")
        return {"name": v, **presets[v]}
    if isinstance(v, dict) and "preset" in v:
        base = _preset(v["preset"], presets, field)
        return {**base, **{k: x for k, x in v.items() if k != "preset"}}
    return v


def deep_merge(base: dict, override: dict) -> dict:
    """Override `base` field by field; a named spec ({name, params}) with a new name replaces the old."""
    out = dict(base)
    for key, value in override.items():
        old = out.get(key)
        renamed = (
            isinstance(value, dict)
            and isinstance(old, dict)
            and value.get("name", old.get("name")) != old.get("name")
        )
        if isinstance(value, dict) and isinstance(old, dict) and not renamed:
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def format_validation_error(err: ValidationError, prefix: str = "") -> str:
    first = err.errors()[0]
    loc = ".".join(str(p) for p in first["loc"] if not str(p).startswith("function-"))
    msg = first["msg"].removeprefix("Value error, ")
    field = f"{prefix}{loc}" if loc else prefix.rstrip(".")
    return f"{field}: {msg}" if field else msg  # a whole-config rule names its fields itself


def parse_config(data: dict, source: str = "config") -> ExperimentConfig:
    found = number_error(ExperimentConfig, data)
    if found:
        raise ConfigError(f"{source}: {found}")
    try:
        return ExperimentConfig.model_validate(data)
    except ValidationError as err:
        raise ConfigError(f"{source}: {format_validation_error(err)}") from None


def load_config_file(path: str | Path, flag: str = "--config") -> dict:
    """A YAML or JSON mapping; every way it can be unusable is a ConfigError naming the file."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"{flag}: {path} is a directory, not a config file")
    if path.exists() and not path.is_file():
        raise ConfigError(f"{flag}: {path} is not a regular file (a FIFO or device?)")
    if not path.is_file():
        raise ConfigError(f"{flag}: no such file {path}")
    if path.stat().st_size > MAX_CONFIG_BYTES:
        raise ConfigError(f"{path}: larger than the bound of {MAX_CONFIG_BYTES // 2**20} MiB")
    try:
        text = path.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise ConfigError(f"{path}: not a UTF-8 text file ({err.reason})") from None
    kind = "JSON" if path.suffix == ".json" else "YAML"
    try:
        data = (
            json.loads(text, object_pairs_hook=reject_duplicate_json_keys)
            if kind == "JSON"
            else load_yaml(text)
        )
    except (ValueError, yaml.YAMLError, RecursionError) as err:
        first = (
            yaml_error_text(err)
            if isinstance(err, yaml.YAMLError)
            else (str(err).splitlines() or [type(err).__name__])[0]
        )
        raise ConfigError(f"{path}: not valid {kind}: {first}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of config fields")
    if count_values(data) > MAX_CONFIG_VALUES:
        raise ConfigError(
            f"{path}: more than {MAX_CONFIG_VALUES:,} values once aliases are expanded (the bound)"
        )
    return data
