"""Task names: which exist and what each is, known without importing any loader (datasets, reasoning-gym).

`pods train` checks the task name here, before any heavy import, so a mistyped name fails in a second.
"""

from __future__ import annotations

import difflib

GYM_PREFIX = "reasoning-gym:"

DESCRIPTIONS = {
    "arithmetic": "Procedural arithmetic problems generated locally (the default; nothing to download).",
    "arithmetic-3term": "Sums of three one-digit numbers, 800 to train and 200 held out (SmolLM2's second task).",
    "gsm8k": "GSM8K grade-school math: openai/gsm8k from the hub, or local files via data_files.",
    "math": "MATH's seven subjects to train, MATH-500 to test; or local files via data_files.",
    GYM_PREFIX + "<name>": "Any reasoning-gym dataset, generated offline (e.g. reasoning-gym:gsm_symbolic).",
}

# reasoning-gym's registry (`reasoning_gym.factory.DATASETS`) of the pinned version: importing it builds every
# generator module (seconds). A test keeps this list equal to the installed registry.
REASONING_GYM_DATASETS = (
    "ab",
    "acre",
    "advanced_geometry",
    "aiw",
    "arc_1d",
    "arc_agi",
    "base_conversion",
    "basic_arithmetic",
    "bf",
    "binary_alternation",
    "binary_matrix",
    "bitwise_arithmetic",
    "boxnet",
    "caesar_cipher",
    "calendar_arithmetic",
    "chain_sum",
    "circuit_logic",
    "codeio",
    "coin_flip",
    "color_cube_rotation",
    "complex_arithmetic",
    "composite",
    "count_bits",
    "count_primes",
    "countdown",
    "course_schedule",
    "cryptarithm",
    "decimal_arithmetic",
    "decimal_chain_sum",
    "dice",
    "emoji_mystery",
    "family_relationships",
    "figlet_font",
    "fraction_simplification",
    "futoshiki",
    "game_of_life",
    "game_of_life_halting",
    "gcd",
    "graph_color",
    "group_anagrams",
    "gsm_symbolic",
    "intermediate_integration",
    "isomorphic_strings",
    "jugs",
    "kakurasu",
    "knight_swap",
    "knights_knaves",
    "largest_island",
    "lcm",
    "leg_counting",
    "letter_counting",
    "letter_jumble",
    "list_functions",
    "mahjong_puzzle",
    "manipulate_matrix",
    "maze",
    "mini_sudoku",
    "modulo_grid",
    "n_queens",
    "needle_haystack",
    "number_filtering",
    "number_format",
    "number_sequence",
    "number_sorting",
    "palindrome_generation",
    "palindrome_partitioning",
    "path_star",
    "polynomial_equations",
    "polynomial_multiplication",
    "pool_matrix",
    "power_function",
    "prime_factorization",
    "products",
    "propositional_logic",
    "puzzle24",
    "quantum_lock",
    "ransom_note",
    "rearc",
    "rectangle_count",
    "rotate_matrix",
    "rotten_oranges",
    "rubiks_cube",
    "rush_hour",
    "self_reference",
    "sentence_reordering",
    "shortest_path",
    "simple_equations",
    "simple_geometry",
    "simple_integration",
    "sokoban",
    "spell_backward",
    "spiral_matrix",
    "string_insertion",
    "string_manipulation",
    "string_splitting",
    "string_synthesis",
    "sudoku",
    "survo",
    "syllogism",
    "time_intervals",
    "tower_of_hanoi",
    "tsumego",
    "word_ladder",
    "word_sequence_reversal",
    "word_sorting",
    "zebra_puzzles",
)


def list_tasks() -> list[tuple[str, str]]:
    """(name, one-line description) of every task `load_task` knows."""
    return list(DESCRIPTIONS.items())


def check_task_name(name: str) -> None:
    """Raise ValueError naming what exists when `name` is neither a task nor `reasoning-gym:<a dataset>`."""
    if name.startswith(GYM_PREFIX):
        dataset = name.removeprefix(GYM_PREFIX)
        if dataset not in REASONING_GYM_DATASETS:
            raise ValueError(
                f"unknown reasoning-gym dataset {dataset!r}{_close_matches(dataset, REASONING_GYM_DATASETS)}; "
                f"available: {', '.join(REASONING_GYM_DATASETS)}"
            )
    elif name not in DESCRIPTIONS:
        raise ValueError(
            f"unknown task {name!r}{_close_matches(name, DESCRIPTIONS)}; available: {', '.join(DESCRIPTIONS)}"
        )


def _close_matches(name: str, names) -> str:
    matches = difflib.get_close_matches(name, list(names), n=3, cutoff=0.6)
    return f" (did you mean {' or '.join(map(repr, matches))}?)" if matches else ""
