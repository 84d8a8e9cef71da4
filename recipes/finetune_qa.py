"""Fine-tune BERT for extractive question answering (SQuAD v1.1 / v2.0 JSON, or flat JSON/JSONL rows): the recipe
``hfbert.recipes.finetune_qa`` run as a script (the same options; ``--help`` lists them).

    python recipes/finetune_qa.py --model_name_or_path DIR --train_file ... --output_dir out
    python recipes/finetune_qa.py args.yaml        # the same arguments from a JSON/YAML file
"""

from hfbert.recipes.finetune_qa import main, run  # noqa: F401  (run: the typed entry point)

if __name__ == "__main__":
    main()
