package store

import "context"

// InsertInbox is the writer's insert into itl_inbox (through the
// Distributed table on a cluster).
func InsertInbox(ctx context.Context, db *DB, parts ...[]InboxRow) error {
	return db.insertInbox(ctx, parts...)
}
