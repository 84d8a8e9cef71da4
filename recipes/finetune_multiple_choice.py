"""Fine-tune BERT for multiple choice (SWAG-style): the recipe
``hfbert.recipes.finetune_multiple_choice`` run as a script (the same options; ``--help`` lists them).

    python recipes/finetune_multiple_choice.py --model_name_or_path DIR --train_file ... --output_dir out
    python recipes/finetune_multiple_choice.py args.yaml        # the same arguments from a JSON/YAML file
"""

from hfbert.recipes.finetune_multiple_choice import main, run  # noqa: F401  (run: the typed entry point)

if __name__ == "__main__":
    main()
