"""Token image generators (backbones) behind cogrpo.core.generator.Generator: the embedded MDM (with its text
encoder and pretraining), aMUSEd through diffusers and Meissonic (cogrpo's own transformer reading the published
weights), the last two on one CLIP + VQ-GAN base (`clip_vq`); `loading.load_generator` picks one from params."""
