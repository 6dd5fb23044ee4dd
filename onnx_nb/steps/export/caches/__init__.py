"""What a generating model carries between steps, as the export writes it: a decoder's key/value cache
(:mod:`.decoder`), an encoder-decoder's two caches (:mod:`.seq2seq`), recurrent states (:mod:`.states`), the
cache's names as transformers gives them (:mod:`.hf_names`) and grouped-query attention's inputs (:mod:`.gqa_io`)."""
