"""Token image generators (backbones) and their text encoders: the embedded MDM and its pretraining."""
