"""Other tools' configuration: finding and safely rewriting Claude Desktop's, Claude Code's and Hermes' config files
(tool_configs). Claude Code's status line script stays at jobs/statusline.py, the path installed status lines run.
"""
