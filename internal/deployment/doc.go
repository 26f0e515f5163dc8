// Package deployment keeps the roles of one deployment on one Redis.
//
// Kafka is the deployment's source of truth, and every role reaches the
// same brokers; Redis is a projection that each role names on its own
// (CHAT_REDIS_ADDRS). A role given another Redis than the others would
// join the production consumer groups, take partitions from the roles
// that serve them, and write its projections and pushes where no gateway
// reads them. So the deployment records, in Kafka, which Redis is its
// own, and the Redis carries the same id:
//
//   - the Redis holds its id in the key chat:deployment
//     (store.Redis.Deployment);
//   - the compacted topic chat.deployment (one partition, key "redis")
//     holds a Record: that id and the addresses roles reached it at.
//
// Check runs before a role joins any consumer group or writes to Redis.
// It tells apart, by those two facts:
//
//   - a fresh deployment (no record, no id): the first role mints an id,
//     claims the Redis with it (SET NX, so roles starting together agree)
//     and records it;
//   - the deployment's Redis, restarted with its data or shared by many
//     roles (the ids agree): the role goes on;
//   - the deployment's Redis after it lost its data (no id, at an address
//     the record names): the role gives it the recorded id back and goes
//     on, and the consumers replay their topics into it as before;
//   - another deployment's Redis (another id), an empty or foreign one at
//     an address the record does not name, or a Redis with an id while
//     Kafka has no record: refused with ErrNotTheDeploymentsRedis, naming
//     both Redis and the ways on (the right CHAT_REDIS_ADDRS, or
//     `chatctl redis adopt` to move the deployment to this Redis for good).
//
// An empty Redis cannot tell by its content whether it lost the
// deployment's data or never had it: only the address it is reached at
// tells, so a Redis that lost its data and moved is adopted by hand.
//
// Watch checks again whenever the role's Redis client dials a new
// connection (a restart, a failover, a DNS change), not per command.
// The functions are safe for concurrent use; a Record is a value.
package deployment
