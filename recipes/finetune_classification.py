"""Fine-tune BERT for sentence or sentence-pair classification, regression or multi-label classification: the recipe
``hfbert.recipes.finetune_classification`` run as a script (the same options; ``--help`` lists them).

    python recipes/finetune_classification.py --model_name_or_path DIR --train_file ... --output_dir out
    python recipes/finetune_classification.py args.yaml        # the same arguments from a JSON/YAML file
"""

from hfbert.recipes.finetune_classification import main, run  # noqa: F401  (run: the typed entry point)

if __name__ == "__main__":
    main()
