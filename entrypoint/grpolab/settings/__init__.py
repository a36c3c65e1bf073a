"""The lab's settings: one dataclass with the lesson's defaults (lab_settings), what each setting allows declared
beside its default (allowed_values), the nearest value that works when a default gives way to the user's own
(nearest_working), and the `--config` file (config_file)."""
