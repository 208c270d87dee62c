"""report"""

# The plan document's schema: written by document, read by plan_doc (one number, so they cannot drift apart; here
# so that writing a plan does not import the reader).
SCHEMA_VERSION = 2
