"""Token image generators (backbones) behind cogrpo.core.generator.Generator: the embedded MDM (with its text
encoder and pretraining) and aMUSEd through diffusers; `loading.load_generator` picks one from params."""
