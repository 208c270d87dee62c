"""report"""

# The plan document's schema: written by document, read by plan_doc (one number, so they cannot drift apart; here
# so that writing a plan does not import the reader).
SCHEMA_VERSION = 2
# Versions plan_doc still reads: 1 lacks each layout's rank_order and placement (added in 2), which then read as the
# default order (Layout.from_dict).
READABLE_SCHEMA_VERSIONS = (1, 2)
