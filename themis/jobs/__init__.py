"""Training jobs run by Themis apps (a TensorFlow/Keras program, checkpoint storage)."""
