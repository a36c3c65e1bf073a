"""The lab's settings: one dataclass with the lesson's defaults, checked and resolved from every source (lab_settings),
what each setting allows declared beside its default (allowed_values), the rules for a value that are more than a
range (rules), the relations between settings, refused or warned of once each setting passed its own check
(relations), how a value is shown and a refusal reads (refusals), the nearest value that works when a default gives
way to the user's own (nearest_working), and the `--config` file (config_file)."""
