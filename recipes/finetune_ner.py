"""Fine-tune BERT for token classification (NER) on pre-split words with BIO tags: the recipe
``hfbert.recipes.finetune_ner`` run as a script (the same options; ``--help`` lists them).

    python recipes/finetune_ner.py --model_name_or_path DIR --train_file ... --output_dir out
    python recipes/finetune_ner.py args.yaml        # the same arguments from a JSON/YAML file
"""

from hfbert.recipes.finetune_ner import main, run  # noqa: F401  (run: the typed entry point)

if __name__ == "__main__":
    main()
