"""Text for models: tokenizers, UTF-8 text files read in pieces, datasets (a text's ids, prepared arrays).

``tokenizer`` and ``textfiles`` are torch-free (``blockspec tokenizer train`` loads no torch);
``dataset`` and ``prepared`` draw batches as tensors. Which tokenizer goes with a model is not
decided here: that is the model source's (``blockspec.sources``).
"""
