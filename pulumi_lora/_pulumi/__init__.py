"""The Pulumi side: resource classes, the dynamic provider's calls, the plugin, the schema."""
