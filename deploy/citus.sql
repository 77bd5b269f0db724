-- UNTESTED HERE: Citus is not installable on the machine this repository
-- is tested on (not in Debian; its own repository unreachable). What it
-- would take to distribute the store by owner, to be run once on the
-- coordinator after the migrations (cmd/server migrate):
--
-- Every table an owner's records live in is keyed by owner first, and
-- every statement the store sends on them names the owner
-- (internal/store/postgres TestStatementsLeadWithOwner records them over
-- the whole conformance suite), so each routes to one shard.
SELECT create_distributed_table('groups', 'owner');
SELECT create_distributed_table('messages', 'owner', colocate_with => 'groups');
SELECT create_distributed_table('consent', 'owner', colocate_with => 'groups');
SELECT create_distributed_table('backups', 'owner', colocate_with => 'groups');
SELECT create_distributed_table('schedule_ticks', 'owner', colocate_with => 'groups');
-- The server's own tables are small and keyed by job or probe, not owner:
-- reference tables, copied to every worker.
SELECT create_reference_table('jobs');
SELECT create_reference_table('store_probe');
