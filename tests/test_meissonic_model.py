"""Meissonic's transformer and the tiny offline snapshot (cogrpo.backbones.meissonic_transformer, tiny_meissonic).

The weight names are checked against a list written out by hand from the authors' model code (viiika/Meissonic,
src/transformer.py), so that the published MeissonFlow/Meissonic safetensors load into MeissonicTransformer.
"""

import json

import pytest
import torch

from cogrpo.backbones.clip_vq import micro_conditions
from cogrpo.backbones.meissonic_transformer import MeissonicTransformer, image_ids
from cogrpo.backbones.tiny_meissonic import TEXT_TOKENS, TRANSFORMER, make_tiny_meissonic

# per block, as the authors' TransformerBlock / SingleTransformerBlock name them (diffusers 0.30 Attention with
# qk_norm="rms_norm": norm_q/k per head, norm_added_q/k on the text stream, to_out only when not pre_only)
DUAL_BLOCK = [f"{m}.{p}" for m in ("norm1.linear", "norm1_context.linear") for p in ("weight", "bias")] + [
    "attn.norm_q.weight", "attn.norm_k.weight", "attn.norm_added_q.weight", "attn.norm_added_k.weight"] + [
    f"attn.{m}.{p}" for m in ("to_q", "to_k", "to_v", "to_out.0", "add_q_proj", "add_k_proj", "add_v_proj",
                              "to_add_out") for p in ("weight", "bias")] + [
    f"{ff}.{m}.{p}" for ff in ("ff", "ff_context") for m in ("net.0.proj", "net.2") for p in ("weight", "bias")]
SINGLE_BLOCK = [f"{m}.{p}" for m in ("norm.linear", "proj_mlp", "proj_out", "attn.to_q", "attn.to_k", "attn.to_v")
                for p in ("weight", "bias")] + ["attn.norm_q.weight", "attn.norm_k.weight"]
TOP = [f"time_text_embed.{e}.linear_{i}.{p}" for e in ("timestep_embedder", "text_embedder") for i in (1, 2)
       for p in ("weight", "bias")] + [
    "context_embedder.weight", "context_embedder.bias",
    "embed.embeddings.weight", "embed.layer_norm.weight", "embed.conv.weight",  # aMUSEd-style, bias-free
    "mlm_layer.conv1.weight", "mlm_layer.layer_norm.weight", "mlm_layer.conv2.weight",
    "cond_embed.linear_1.weight", "cond_embed.linear_2.weight",  # sample_proj_bias=False
    "encoder_proj_layer_norm.weight", "project_to_hidden_norm.weight", "project_to_hidden.weight",
    "project_from_hidden_norm.weight", "project_from_hidden.weight",
    "down_block.downsample.norm.weight", "down_block.downsample.conv.weight",
    "up_block.upsample.norm.weight", "up_block.upsample.conv.weight"]
PUBLISHED = dict(attention_head_dim=128, axes_dims_rope=[16, 56, 56], codebook_size=8192, downsample=True,
                 guidance_embeds=False, in_channels=64, joint_attention_dim=1024, num_attention_heads=8,
                 num_layers=14, num_single_layers=28, patch_size=1, pooled_projection_dim=1024, upsample=True,
                 vocab_size=8256)  # MeissonFlow/Meissonic transformer/config.json


def expected_keys(num_layers: int, num_single_layers: int) -> set[str]:
    return (set(TOP) | {f"transformer_blocks.{i}.{k}" for i in range(num_layers) for k in DUAL_BLOCK}
            | {f"single_transformer_blocks.{i}.{k}" for i in range(num_single_layers) for k in SINGLE_BLOCK})


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return make_tiny_meissonic(tmp_path_factory.mktemp("hub") / "tiny-meissonic")


def _inputs(model: MeissonicTransformer, batch: int = 3, side: int = 8, seed: int = 0) -> dict:
    g = torch.Generator().manual_seed(seed)
    cfg = model.config
    return dict(hidden_states=torch.randint(0, cfg.vocab_size, (batch, side, side), generator=g),
                encoder_hidden_states=torch.randn(batch, TEXT_TOKENS, cfg.joint_attention_dim, generator=g),
                pooled_projections=torch.randn(batch, cfg.pooled_projection_dim, generator=g),
                micro_conds=micro_conditions(16, 16, batch), timestep=torch.tensor([7]))


def test_snapshot_has_the_published_layout(tiny):
    for part, files in {"transformer": ["config.json", "diffusion_pytorch_model.safetensors"],
                        "vqvae": ["config.json", "diffusion_pytorch_model.safetensors"],
                        "text_encoder": ["config.json", "model.safetensors"],
                        "tokenizer": ["vocab.json", "merges.txt", "tokenizer_config.json"],
                        "scheduler": ["scheduler_config.json"]}.items():
        for name in files:
            assert (tiny / part / name).is_file(), f"{part}/{name}"
    index = json.loads((tiny / "model_index.json").read_text())
    assert set(index) >= {"_class_name", "scheduler", "text_encoder", "tokenizer", "transformer", "vqvae"}
    config = json.loads((tiny / "transformer" / "config.json").read_text())
    assert config["_class_name"] == "Transformer2DModel"
    assert set(PUBLISHED) <= set(config), "every published config field is written"
    scheduler = json.loads((tiny / "scheduler" / "scheduler_config.json").read_text())
    assert scheduler["mask_token_id"] == config["vocab_size"] - 1 and scheduler["masking_schedule"] == "cosine"


def test_weight_names_are_the_published_ones(tiny):
    model = MeissonicTransformer.from_pretrained(tiny / "transformer")
    assert set(model.state_dict()) == expected_keys(TRANSFORMER["num_layers"], TRANSFORMER["num_single_layers"])
    from safetensors.torch import load_file

    assert set(load_file(str(tiny / "transformer" / "diffusion_pytorch_model.safetensors"))) == set(
        model.state_dict())


def test_published_config_builds_the_published_model():
    """The default config is the hub's, and its size matches the hub's files (4.03 GB fp32, 2.01 GB fp16)."""
    with torch.device("meta"):
        model = MeissonicTransformer()
    assert {k: model.config[k] for k in PUBLISHED} == {**PUBLISHED, "axes_dims_rope": (16, 56, 56)}
    assert set(model.state_dict()) == expected_keys(14, 28)
    n = sum(p.numel() for p in model.parameters())
    assert n == 1_006_946_304 and round(4 * n / 1e9, 2) == 4.03 and round(2 * n / 1e9, 2) == 2.01


def test_config_constraints_of_the_authors_model():
    with pytest.raises(ValueError, match="pooled_projection_dim"):
        MeissonicTransformer(**{**TRANSFORMER, "pooled_projection_dim": 24})
    with pytest.raises(ValueError, match="axes_dims_rope"):
        MeissonicTransformer(**{**TRANSFORMER, "axes_dims_rope": [4, 4, 4]})
    with pytest.raises(ValueError, match="guidance_embeds true: a guidance-distilled Meissonic is not supported"):
        MeissonicTransformer(**{**TRANSFORMER, "guidance_embeds": True})


def test_rope_positions_are_the_pipeline_s():
    """(0, row, col), row-major, as src/pipeline.py's _prepare_latent_image_ids lays out the grid it is given."""
    assert image_ids(2, 3).tolist() == [[0, 0, 0], [0, 0, 1], [0, 0, 2], [0, 1, 0], [0, 1, 1], [0, 1, 2]]


def test_forward_shapes_and_inputs(tiny):
    torch.manual_seed(0)
    model = MeissonicTransformer.from_pretrained(tiny / "transformer").eval()
    inputs = _inputs(model)
    with torch.no_grad():
        logits = model(**inputs)
        assert logits.shape == (3, TRANSFORMER["codebook_size"], 8, 8) and logits.isfinite().all()
        # defaults are the authors' ids: text zeros, then (0, row, col) over the 4×4 grid after downsampling
        grid = torch.tensor([[0, row, col] for row in range(4) for col in range(4)], dtype=torch.float32)
        explicit = model(**inputs, txt_ids=torch.zeros(TEXT_TOKENS, 3), img_ids=grid)
        assert torch.equal(logits, explicit)
        assert not torch.allclose(logits, model(**{**inputs, "timestep": torch.tensor([0])}))
        assert torch.equal(logits, model(**{**inputs, "timestep": torch.tensor([7.0], dtype=torch.float64)}))
        assert not torch.allclose(logits, model(**{**inputs, "micro_conds": micro_conditions(16, 16, 3, (4, 4))}))
        # rows are independent: one sample alone gives its own logits
        alone = model(**{k: v[1:2] if k not in ("timestep",) else v for k, v in inputs.items()})
        assert torch.allclose(alone, logits[1:2], atol=1e-5)


def test_save_and_reload_give_identical_logits(tiny, tmp_path):
    model = MeissonicTransformer.from_pretrained(tiny / "transformer").eval()
    with torch.no_grad():
        for p in model.parameters():  # away from the saved weights, so a reload that silently re-inits would show
            p.add_(0.01 * torch.randn_like(p))
    model.save_pretrained(tmp_path / "transformer")
    again = MeissonicTransformer.from_pretrained(tmp_path / "transformer").eval()
    inputs = _inputs(model, seed=1)
    with torch.no_grad():
        assert torch.equal(model(**inputs), again(**inputs))
        assert not torch.equal(again(**inputs), MeissonicTransformer.from_pretrained(tiny / "transformer")(**inputs))


def test_parts_fit_together_as_the_authors_pipeline_uses_them(tiny):
    """One CFG step as src/pipeline.py computes it: 77-token CLIP condition (projected pooled, penultimate hidden
    states), [uncond; cond] batch, uncond + w (cond − uncond), a scheduler step with the snapshot's mask id
    (diffusers' AmusedScheduler: the same step rule), VQ decoding of the tokens."""
    from diffusers import AmusedScheduler, VQModel
    from transformers import CLIPTextModelWithProjection, CLIPTokenizer

    tokenizer = CLIPTokenizer.from_pretrained(tiny / "tokenizer")
    text = CLIPTextModelWithProjection.from_pretrained(tiny / "text_encoder").eval()
    model = MeissonicTransformer.from_pretrained(tiny / "transformer").eval()
    vqvae = VQModel.from_pretrained(tiny / "vqvae").eval()
    scheduler = AmusedScheduler.from_pretrained(tiny / "scheduler")
    scale = 2 ** (len(vqvae.config.block_out_channels) - 1)
    side = 16 // scale
    with torch.no_grad():
        ids = tokenizer(["", "", "a red cube", "two dogs"], padding="max_length", truncation=True,
                        max_length=TEXT_TOKENS, return_tensors="pt").input_ids
        out = text(ids, output_hidden_states=True)
        x = torch.full((2, side, side), scheduler.config.mask_token_id)
        scheduler.set_timesteps(4, (2, 0))
        t = scheduler.timesteps[0]
        logits = model(hidden_states=x.repeat(2, 1, 1), encoder_hidden_states=out.hidden_states[-2],
                       pooled_projections=out.text_embeds, micro_conds=micro_conditions(16, 16, 4),
                       timestep=torch.tensor([int(t)]))
        uncond, cond = logits.chunk(2)
        x = scheduler.step(uncond + 9 * (cond - uncond), t, x, generator=torch.Generator().manual_seed(0)).prev_sample
        masked = (x == scheduler.config.mask_token_id).sum((1, 2))
        assert masked.tolist() == [int(side * side * torch.cos(torch.tensor(torch.pi / 8)))] * 2  # cos(π/2 · 1/4)
        x = torch.where(x == scheduler.config.mask_token_id, 0, x)
        image = vqvae.decode(x, force_not_quantize=True, shape=(2, side, side, vqvae.config.latent_channels)).sample
    assert image.shape == (2, 3, 16, 16) and image.isfinite().all()
