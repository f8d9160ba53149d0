export function applyConfig(base: string, token: string, file?: string): Promise<{ account: string; queues: Array<{ queue_name: string }> }>;
