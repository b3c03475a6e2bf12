"""Export a trained aMUSEd or Meissonic as a snapshot folder: `python -m pipelines.export models/trained OUT`.

OUT holds the snapshot's parts with the trained LoRA adapters merged into the transformer (aMUSEd: loadable by
`AmusedPipeline.from_pretrained(OUT)`; Meissonic: in the published layout, its transformer/ loadable by
`MeissonicTransformer.from_pretrained`; both: by cogrpo, model.pretrained = OUT with lora_rank 0), and the learned
schedules (`ModelFolder.schedules`) and a prompt- or state-conditioned policy (`ModelFolder.conditioned_policy`)
beside them (the pipelines themselves cannot take per-step knobs, nor choose them step by step; cogrpo's sampler
does: docs/amused.md). The model params come from params.yaml (model.pretrained names the base snapshot). No
Prefect, no MLflow: a file conversion.
"""

import argparse
import shutil
import sys
from pathlib import Path

from adapters.env import apply_defaults
from cogrpo.errors import InputError


def main(argv: list[str] | None = None) -> Path:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", type=Path, help="a trained model folder (the train stage's models/trained)")
    ap.add_argument("out", type=Path)
    ap.add_argument("--params", default="params.yaml")
    args = ap.parse_args(argv)
    apply_defaults()
    try:
        from cogrpo.backbones.loading import load_generator
        from cogrpo.model_folder import ModelFolder
        from cogrpo.validate import load_params

        cfg = load_params(args.params).model
        if cfg.backbone == "embedded":
            raise InputError(f"{args.params}: model.backbone is 'embedded'; only aMUSEd and Meissonic export a "
                             "snapshot")
        gen = load_generator(cfg, {"model": args.model})
        gen.export(args.out)
        folder = ModelFolder(args.model)
        for file in [*folder.schedules(), *filter(None, [folder.conditioned_policy()])]:
            shutil.copy(file, args.out / file.name)
    except (InputError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    print(args.out)
    return args.out


if __name__ == "__main__":
    main()
