"""report"""

# The plan document's schema: written by document, read by plan_doc (one number, so they cannot drift apart; here
# so that writing a plan does not import the reader).
SCHEMA_VERSION = 3
# Versions plan_doc still reads: 2 lacks each layout's rank_order and plans[].placement (added in 3), which then read
# as the default order (Layout.from_dict).
READABLE_SCHEMA_VERSIONS = (2, 3)
