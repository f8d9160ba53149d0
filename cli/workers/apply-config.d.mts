export interface QueuesConfig {
  account: string;
  queues?: Array<{
    queue_name: string;
    settings?: Record<string, unknown>;
    consumer?: {
      type?: string;
      script_name?: string;
      settings?: Record<string, unknown>;
      dead_letter_queue?: string | null;
    };
  }>;
}
export function applyConfig(base: string, token: string, fileOrConfig?: string | QueuesConfig): Promise<QueuesConfig>;
